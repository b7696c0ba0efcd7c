#!/bin/bash
#SBATCH --input=commands.txt
#SBATCH --output=results.txt
#SBATCH --error=errors.txt
#SBATCH --time=5
bc -l
