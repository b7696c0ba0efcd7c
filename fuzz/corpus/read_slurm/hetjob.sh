#!/bin/bash
#SBATCH --ntasks=1 --mem=64G
#SBATCH hetjob
#SBATCH --ntasks=32 --mem-per-cpu=2G
srun --het-group=0 ./server : --het-group=1 ./workers
