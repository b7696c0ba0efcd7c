#!/bin/bash
#SBATCH --mem=4GB
#SBATCH --tmp=200MB
#SBATCH --time=30
./reduce input.dat
