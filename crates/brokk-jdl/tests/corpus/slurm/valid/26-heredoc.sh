#!/bin/bash
#SBATCH --job-name=report
#SBATCH --output=report.txt
#SBATCH --time=5
cat <<END
Report for $SLURM_JOB_ID
END
for f in *.csv; do
  wc -l "$f"
done
