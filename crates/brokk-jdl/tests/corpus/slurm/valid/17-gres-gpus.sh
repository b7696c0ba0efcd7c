#!/bin/bash
#SBATCH --job-name=train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:a100:2
#SBATCH --mem=64G
#SBATCH --time=12:00:00
module load cuda
srun python train.py --epochs 40
