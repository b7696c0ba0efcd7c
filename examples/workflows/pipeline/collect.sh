#!/bin/sh
#SBATCH --job-name=collect
#SBATCH --time=10:00
#SBATCH --output=collected.txt
cat part1.txt part2.txt part3.txt part4.txt part5.txt
