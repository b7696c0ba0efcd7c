#!/bin/sh
#SBATCH --job-name=hello-slurm
#SBATCH --output=slurm.out
#SBATCH --time=00:05:00
echo "Hello from a Slurm batch script"
