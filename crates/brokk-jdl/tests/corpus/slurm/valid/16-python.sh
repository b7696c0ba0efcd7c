#!/usr/bin/env python3
#SBATCH --job-name=py-stats
#SBATCH --ntasks=1
#SBATCH --time=00:10:00
#SBATCH --output=stats.out
import statistics
values = [3, 1, 4, 1, 5, 9, 2, 6]
print("mean", statistics.mean(values))
print("median", statistics.median(values))
