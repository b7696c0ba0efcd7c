#!/bin/bash
#SBATCH --job-name=coalloc-part-1
#SBATCH --reservation=brokk_res_17
#SBATCH --ntasks=8
#SBATCH --time=02:00:00
srun ./part1
