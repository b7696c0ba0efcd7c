#!/bin/bash
#SBATCH --gpus=many
./gpu_app
