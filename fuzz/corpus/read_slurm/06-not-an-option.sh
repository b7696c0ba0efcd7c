#!/bin/bash
#SBATCH ntasks=4
srun a
