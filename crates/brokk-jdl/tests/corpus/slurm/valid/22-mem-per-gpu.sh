#!/bin/bash
#SBATCH --gpus=2
#SBATCH --mem-per-gpu=24G
#SBATCH --time=4:00:00
python finetune.py
