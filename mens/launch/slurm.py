"""`mens launch slurm`: sbatch.sh in the run dir, `sbatch` it as it is.

hw.nodes nodes × hw.devices tasks per node (one task per device, GPUs per node on a GPU tier),
then `srun python -m mens <the user's overrides>`: srun starts every rank and sets SLURM_PROCID,
SLURM_NTASKS, SLURM_NODELIST…, and Lightning's SLURMEnvironment takes the world from them (it
does so unless the job is named `bash` or `interactive`: the job is named after the run). The
batch job inherits the submitting shell's environment (sbatch's default --export=ALL), so
`python` is the one that has this mens, and secrets reach it by name, never written here.
"""
from __future__ import annotations

import shlex

from mens.launch.common import Launch

FILE = "sbatch.sh"


def render(launch: Launch) -> str:
    lc = launch.cfg.launch
    sbatch = [f"--job-name={launch.name}", f"--nodes={launch.nodes}",
              f"--ntasks-per-node={launch.devices}"]
    if launch.gpu:
        sbatch.append(f"--gpus-per-node={launch.devices}")
    for key in ("partition", "account", "time"):
        if lc[key]:
            sbatch.append(f"--{key}={lc[key]}")
    # the job's log beside the run's own files (%j: the job id)
    sbatch.append(f"--output={launch.out_dir}/slurm-%j.out")
    return "\n".join([
        "#!/bin/bash",
        *(f"#SBATCH {s}" for s in sbatch),
        f"# mens launch slurm: {launch.nodes} node(s) × {launch.devices} task(s), one per device;"
        f" Lightning's SLURMEnvironment reads the world from srun.",
        "set -euo pipefail",
        shlex.join(["srun", "python", "-m", "mens", *launch.overrides()]),
    ]) + "\n"
