#!/bin/dash
#SBATCH -J tiny -t 2 -o tiny.out
set -eu
echo "$(uname -s)"
