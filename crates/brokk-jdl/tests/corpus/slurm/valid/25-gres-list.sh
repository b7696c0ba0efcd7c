#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks=4
#SBATCH --gres=gpu:tesla:1,nvme:1
#SBATCH --time=30:00
srun ./solve --device 0
