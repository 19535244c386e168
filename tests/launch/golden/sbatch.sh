#!/bin/bash
#SBATCH --job-name=run-1
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --partition=gpu
#SBATCH --time=1-00:00:00
#SBATCH --output=<RUN_DIR>/slurm-%j.out
# mens launch slurm: 2 node(s) × 8 task(s), one per device; Lightning's SLURMEnvironment reads the world from srun.
set -euo pipefail
srun python -m mens +hw=h100 hw.devices=8 hw.nodes=2 +rung=8b lane=full 'data.system_prompt='"'"'You are terse.'"'"'' hydra.run.dir=<RUN_DIR>
