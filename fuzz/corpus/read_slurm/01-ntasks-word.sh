#!/bin/bash
#SBATCH --ntasks=four
srun a
