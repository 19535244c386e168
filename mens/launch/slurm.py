"""`mens launch slurm`: sbatch.sh in the run dir, `sbatch` it as it is.

hw.nodes nodes × hw.devices tasks per node (one task per device, GPUs per node on a GPU tier),
then `srun python -m mens <the user's overrides>`: srun starts every rank and sets SLURM_PROCID,
SLURM_NTASKS, SLURM_NODELIST…, and Lightning's SLURMEnvironment takes the world from them (it
does so unless the job is named `bash` or `interactive`: the job is named after the run). The
batch job inherits the submitting shell's environment (sbatch's default --export=ALL), so
`python` is the one that has this mens, and secrets reach it by name, never written here.

sbatch reads each `#SBATCH` line as words of its own grammar (Slurm's src/sbatch/opt.c,
`_get_argument`), not bash's: whitespace ends a word, `"…"` or `'…'` groups, a backslash escapes
the next character (inside quotes too), an unquoted `#` starts a comment. A value is written in
double quotes wherever it needs them (`sbatch_word`): a run dir with a space would otherwise end
`--output` at the space and the log would go elsewhere.
"""
from __future__ import annotations

import re
import shlex

from mens.errors import ConfigError
from mens.launch.common import Launch

FILE = "sbatch.sh"
_PLAIN = re.compile(r"""[^\s"'\\#]*""")   # what sbatch reads as one word unquoted


def sbatch_word(flag: str, value: str, key: str) -> str:
    """`--flag=value` as sbatch reads it back from an #SBATCH line: value quoted when needed.
    `key`: the config key the value comes from (named if it cannot be written)."""
    if "\n" in value:   # the #SBATCH line ends there: no quoting carries a line break
        raise ConfigError(f"{key}={value!r}: an #SBATCH line cannot hold a line break (sbatch "
                          f"reads {flag} up to it): name it without one.", key=key)
    if _PLAIN.fullmatch(value):
        return f"{flag}={value}"
    return f'{flag}="' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(launch: Launch) -> str:
    lc = launch.cfg.launch
    sbatch = [f"--job-name={launch.name}", f"--nodes={launch.nodes}",
              f"--ntasks-per-node={launch.devices}"]
    if launch.gpu:
        sbatch.append(f"--gpus-per-node={launch.devices}")
    for key in ("partition", "account", "time"):
        if lc[key]:
            sbatch.append(sbatch_word(f"--{key}", str(lc[key]), f"launch.{key}"))
    # the job's log beside the run's own files (%j: the job id); --output is a filename
    # pattern, where a % of the run dir's own is written %% and a backslash turns every
    # replacement off (sbatch's "filename pattern"), so %j could not be said beside one
    if "\\" in str(launch.out_dir):
        raise ConfigError(f"hydra.run.dir={launch.out_dir}: a backslash in the run dir turns "
                          f"off SLURM's %j in the job's log name (--output): name the run dir "
                          f"without one.", key="hydra.run.dir")
    log = f"{str(launch.out_dir).replace('%', '%%')}/slurm-%j.out"
    sbatch.append(sbatch_word("--output", log, "hydra.run.dir"))
    return "\n".join([
        "#!/bin/bash",
        *(f"#SBATCH {s}" for s in sbatch),
        f"# mens launch slurm: {launch.nodes} node(s) × {launch.devices} task(s), one per device;"
        f" Lightning's SLURMEnvironment reads the world from srun.",
        "set -euo pipefail",
        shlex.join(["srun", "python", "-m", "mens", *launch.overrides()]),
    ]) + "\n"
