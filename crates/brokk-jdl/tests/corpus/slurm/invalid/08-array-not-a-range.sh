#!/bin/bash
#SBATCH --array=5-1
echo "$SLURM_ARRAY_TASK_ID"
