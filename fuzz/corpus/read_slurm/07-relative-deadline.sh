#!/bin/bash
#SBATCH --deadline=tomorrow
srun a
