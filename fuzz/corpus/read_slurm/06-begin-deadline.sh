#!/bin/bash
#SBATCH --begin=2026-11-23T02:00:00
#SBATCH --deadline=2026-11-23T08:00:00
#SBATCH --time=04:00:00
#SBATCH --output=nightly.log
/opt/bin/nightly_reindex
