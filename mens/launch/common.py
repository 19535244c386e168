"""What every emitter shares: the forwarded overrides, processes per node, names, the write.

The launched command is the user's own: `python -m mens` with the overrides they gave to
`mens launch X`, unchanged, less the `launch.*` keys (they configure the emitter, not the run)
and plus `hydra.run.dir=<this run dir>` (unless they set one): every node and every elastic
restart must name the same run dir, where a Hydra default (`outputs/<date>/<time>_…`) would
give each process its own and a restarted group would not find its checkpoint.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from mens.config.schema import AUTO
from mens.errors import ConfigError
from mens.run.rundir import RunDir

# What a run reads from the environment, passed by name only (sky --secret, Kubernetes
# secretKeyRef; srun and torchrun inherit the caller's environment): never written to a file.
SECRETS = ("HF_TOKEN", "WANDB_API_KEY")
RDZV_PORT = 29500   # torchrun's own default port for the c10d store
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")   # ${now:%Y-%m-%d}, the day dir of a default run dir


@dataclass(frozen=True)
class Launch:
    cfg: DictConfig
    out_dir: Path           # this run's dir (absolute): the emitted file goes here
    argv: list[str]         # the user's overrides to `mens launch X`, as given

    def __post_init__(self):
        if self.cfg.hw.name == AUTO:
            raise ConfigError(
                "hw=auto describes this machine, not the nodes a launcher starts: name their "
                "tier (e.g. +hw=h100 hw.devices=8, or +hw=cpu), so that the plan and the "
                "processes and GPUs asked per node are theirs.", key="hw")

    def overrides(self, remote_dir: str | None = None) -> list[str]:
        """What the launched `python -m mens` gets: see forwarded. `remote_dir`: the run dir as
        the launched processes see it where they share no filesystem with this one (a pod):
        it replaces the user's own hydra.run.dir, a path on this machine."""
        if remote_dir is None:
            return forwarded(self.argv, self.out_dir)
        return forwarded([a for a in self.argv if not a.startswith("hydra.run.dir=")], remote_dir)

    @property
    def nodes(self) -> int:
        return int(self.cfg.hw.nodes)

    @property
    def devices(self) -> int:
        return devices_per_node(self.cfg)

    @property
    def gpu(self) -> bool:
        """A CUDA tier: the engine must hand each node its GPUs (a CPU/MPS tier has none)."""
        return self.cfg.hw.backend == "cuda"

    @property
    def name(self) -> str:
        return run_name(self.out_dir)


def forwarded(argv: list[str], run_dir: Path | str) -> list[str]:
    """The user's overrides as given, less launch.*, plus the run dir every process shares."""
    # flags (--cfg, --help) are Hydra's to the launch command itself, never forwarded
    keep = [a for a in argv if not a.startswith("-") and
            not a.lstrip("+~").startswith("launch.")]
    if not any(a.startswith("hydra.run.dir=") for a in keep):
        keep.append(f"hydra.run.dir={run_dir}")
    return keep


def refuse_flags(argv: list[str], what: str) -> int:
    """A launcher emits one run: a sweep (-m) cannot be forwarded to it."""
    sweep = [a for a in argv if a in ("-m", "--multirun")]
    if sweep:
        raise ConfigError(
            f"`mens launch {what}` takes no {sweep[0]}: it writes the launcher of one run. For "
            f"a sweep on SLURM use `python -m mens -m … hydra/launcher=mens_slurm` "
            f"(conf/hydra/launcher/mens_slurm.yaml).")
    return 0


def devices_per_node(cfg: DictConfig) -> int:
    """hw.devices as a number of processes per node. `auto` is one process on a CPU/MPS tier
    (as mens.train.strategy reads it); on a GPU tier the launcher cannot see the node's GPUs
    from here, so it must be said."""
    d = cfg.hw.devices
    if d in (None, AUTO):
        if cfg.hw.backend == "cuda":
            raise ConfigError(
                f"hw.devices=auto with hw={cfg.hw.name}: a launcher must know how many processes "
                f"to start on each node and cannot see that node's GPUs from here. Set "
                f"hw.devices to the GPUs per node (e.g. hw.devices=8).", key="hw.devices")
        return 1
    return int(d)


def run_name(out_dir: Path) -> str:
    """The run dir's name in the characters every engine accepts in a job name or id. Hydra's
    default run dir (conf/mens.yaml) is outputs/<date>/<time>_<job>: its name alone is the
    time of day, which the same second of another day repeats (a TrainJob of that name, or the
    pods' run dir, would clash), so the date above it is part of the name."""
    path = Path(out_dir)
    name = f"{path.parent.name}-{path.name}" if _DATE.fullmatch(path.parent.name) else path.name
    return re.sub(r"[^A-Za-z0-9-]+", "-", name).strip("-").lower() or "mens"


def write(out_dir: Path, name: str, text: str) -> Path:
    """Atomically into the run dir (rank zero: this process), then said."""
    path = RunDir(out_dir).write_text(name, text)
    print(f"wrote {path}")
    return path
