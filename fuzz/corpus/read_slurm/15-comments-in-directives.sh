#!/bin/bash
#SBATCH --ntasks=2        # two tasks
#SBATCH --mem=4G          # per node
#SBATCH --job-name="my job"
srun hostname
