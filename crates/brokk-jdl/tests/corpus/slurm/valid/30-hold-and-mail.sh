#!/bin/bash
#SBATCH --hold
#SBATCH --mail-type=END,FAIL --mail-user=ann@example.org
#SBATCH --time=1:00:00
./postprocess --all
