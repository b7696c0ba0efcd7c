#!/bin/bash
#SBATCH --ntasks=3
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=8
#SBATCH -t 1:00:00
srun ./inference
