#!/bin/bash
#SBATCH --nodes=4
#SBATCH --gpus-per-node=a100:8
#SBATCH --ntasks-per-node=8
#SBATCH --cpus-per-task=6
#SBATCH --time=2-00:00:00
srun python -m torch.distributed.run train.py
