#!/bin/sh
#SBATCH -G v100:4
#SBATCH --cpus-per-gpu=6
#SBATCH --time=2:00:00
nvidia-smi; ./bench
