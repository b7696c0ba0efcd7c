#!/bin/bash
#SBATCH --gpus=2
#SBATCH --cpus-per-gpu=4
#SBATCH -c 8
./train
