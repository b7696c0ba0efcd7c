#!/usr/bin/env python3
#SBATCH --job-name=sweep
#SBATCH --array=1-3
#SBATCH --output=sweep_%a.out
#SBATCH --time=00:15:00
import os
point = int(os.environ["SLURM_ARRAY_TASK_ID"])
print("sweep point", point, "result", point ** 2)
