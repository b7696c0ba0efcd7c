#!/bin/bash
#SBATCH --export=ALL,MODEL=resnet50,EPOCHS=90
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=8
#SBATCH --mem=64G
python train.py
