#!/bin/bash
#SBATCH --ntasks=1
#SBATCH --array=1-4
#SBATCH hetjob
#SBATCH --ntasks=8
./run
