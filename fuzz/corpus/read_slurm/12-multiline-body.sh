#!/bin/bash
#SBATCH --job-name=pipeline
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --time=2:00:00

set -euo pipefail
cd "$SLURM_SUBMIT_DIR"
for f in data/*.csv; do
  ./clean "$f" > "clean/$(basename "$f")"
done
./summarize clean/ > summary.txt
