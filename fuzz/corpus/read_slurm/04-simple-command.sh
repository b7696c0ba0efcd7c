#!/bin/bash
#SBATCH --ntasks=4
#SBATCH --time=30:00
srun ./mpi_hello --greeting 'hi there'
