#!/bin/sh
# Every slot of a small site for two minutes.
#SBATCH --job-name=wide
#SBATCH --ntasks=8
#SBATCH --time=3
sleep 120
