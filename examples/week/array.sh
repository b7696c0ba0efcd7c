#!/bin/sh
# A Slurm array of three: each task says which it is.
#SBATCH --job-name=week
#SBATCH --array=1-3
#SBATCH --time=5
echo "task $SLURM_ARRAY_TASK_ID of array $SLURM_ARRAY_JOB_ID"
