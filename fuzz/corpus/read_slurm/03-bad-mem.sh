#!/bin/bash
#SBATCH --mem=lots
srun a
