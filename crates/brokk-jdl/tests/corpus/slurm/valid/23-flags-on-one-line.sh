#!/bin/bash
#SBATCH --overcommit --contiguous -k --reboot --time=10 --qos=debug --mincpus=4
#SBATCH --delay-boot=5 --network=Instances=2 --wait-all-nodes=1 -N 2
srun ./probe
