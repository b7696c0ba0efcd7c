#!/bin/bash
#SBATCH --mem=8G
#SBATCH --mem-per-cpu=2G
./run
