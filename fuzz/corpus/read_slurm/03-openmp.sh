#!/bin/bash
#SBATCH -J omp-test
#SBATCH -n 1
#SBATCH -c 16
#SBATCH --mem-per-cpu=2000M
#SBATCH -t 90
#SBATCH -o omp.%j.out
#SBATCH -e omp.%j.err
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
./omp_app
