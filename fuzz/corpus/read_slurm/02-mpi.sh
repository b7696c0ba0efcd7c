#!/bin/bash
#SBATCH --job-name=lammps
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=32
#SBATCH --mem=180G
#SBATCH --time=1-12:00:00
#SBATCH --partition=compute
#SBATCH --account=chem123

module load lammps/2023
srun lmp -in in.melt
