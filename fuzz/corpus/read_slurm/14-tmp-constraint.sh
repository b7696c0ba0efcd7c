#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks=16
#SBATCH --tmp=100G
#SBATCH --constraint=skylake
#SBATCH --exclusive
#SBATCH --time=6:00:00
./io_heavy --scratch $TMPDIR
