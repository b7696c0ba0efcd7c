#!/bin/bash
#SBATCH --job-name=long-sim
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=frank@example.org
#SBATCH --time=7-00:00:00
#SBATCH --ntasks=1
#SBATCH --qos=long
./simulate --years 100
