#!/bin/bash
#SBATCH --ntasks=8
#SBATCH --mem-per-cpu=1500MB
#SBATCH --tmp=20GB
#SBATCH --time=45
mpirun ./ocean
