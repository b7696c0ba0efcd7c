#!/bin/sh
#SBATCH --job-name=prepare
#SBATCH --ntasks=1
#SBATCH --time=00:05:00
#SBATCH --output=prepared.txt
seq 1 1000
