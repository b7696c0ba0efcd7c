#!/bin/bash
#SBATCH --array=1,4,9,16
#SBATCH --output=sq_%A_%a.out
#SBATCH --error=sq_%A_%a.err
#SBATCH --mem-per-cpu=500M
./square $SLURM_ARRAY_TASK_ID
