#!/bin/sh
#SBATCH -N 2 -n 64 -p debug
#SBATCH -t 0:30:00 -A proj42
#SBATCH -D /scratch/proj42/run3
mpirun -np 64 ./a.out
