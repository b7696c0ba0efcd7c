#!/bin/sh
#SBATCH --job-name=left
#SBATCH --ntasks=1
#SBATCH --time=00:05:00
#SBATCH --output=left.txt
head -500 prepared.txt
