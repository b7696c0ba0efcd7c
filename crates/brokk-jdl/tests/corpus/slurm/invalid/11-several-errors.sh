#!/bin/bash
#SBATCH --ntasks=four
#SBATCH --time=forever
#SBATCH --mem=lots
srun ./app
