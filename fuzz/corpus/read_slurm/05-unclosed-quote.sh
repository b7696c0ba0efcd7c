#!/bin/bash
#SBATCH --job-name="unclosed
srun a
