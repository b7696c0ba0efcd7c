#!/bin/bash
#SBATCH --array=0-200000
./task
