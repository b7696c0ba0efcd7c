#!/bin/bash
#SBATCH --time=10
echo start
#SBATCH --time=20
echo end
