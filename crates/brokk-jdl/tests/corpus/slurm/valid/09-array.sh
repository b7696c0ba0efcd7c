#!/bin/bash
#SBATCH --array=1-8
#SBATCH --output=logs/task_%A_%a.out
#SBATCH --time=10
./process_chunk.sh $SLURM_ARRAY_TASK_ID
