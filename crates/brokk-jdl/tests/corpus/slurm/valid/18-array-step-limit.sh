#!/bin/bash
#SBATCH --array=0-6:3%2
#SBATCH --output=part_%A_%3a.out
#SBATCH --time=5
./analyse.sh --part "$SLURM_ARRAY_TASK_ID"
