"""Several processes training one run: the Lightning strategy a spec asks for, each rank's share
of the rows, sums over ranks, and the launcher that starts ranks 1…N-1.

    hw.strategy  single → one device (Lightning's "auto")
                 ddp    → DDPStrategy: every rank holds the whole (frozen) base and the adapter,
                          gradients are averaged (LoRA, QLoRA, DPO; the full lane when it fits)
                 fsdp2  → ModelParallelStrategy(data_parallel_size=N, tensor_parallel_size=1):
                          MensModule.configure_model puts `fully_shard` on every decoder layer and
                          the root (full lane). tensor_parallel_size must be 1 explicitly: "auto"
                          asks for a 2×2 mesh on 2 processes and fails. (FSDP1 refuses CPU.)

Determinism across world sizes: rank r of N takes rows r, r+N, r+2N, … of the epoch's fixed
order (torch's DistributedSampler with shuffle=False — Lightning's automatic sampler shuffles
training data even when told not to, so the Trainer gets use_distributed_sampler=False), so
optimizer step k sees the same N·micro rows as one process with micro N·micro. The loss is
weighted by tokens over all ranks (module.MensModule), so the gradient is the one-process one.

The tail: when the epoch's rows do not divide by N, DistributedSampler pads each rank's list by
repeating rows from the start. A repeat would train on those rows twice and change the curve, so
mens marks it (Repeat) and the batch gives it no supervised token: it costs a forward/backward
(every rank must run the same number of steps) and adds exactly nothing to loss or gradient.
No row is dropped and none counts twice; the last step of an epoch matches one process's.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mens.errors import ConfigError

STRATEGIES = ("single", "ddp", "fsdp2")
RUN_DIR_ENV = "MENS_RUN_DIR"   # the run dir rank 0 trains into, given to the ranks it starts
# what Lightning's launcher sets in rank 0's environment; cleared after a run, so the next job of
# a sweep starts its own ranks (with LOCAL_RANK set Lightning believes processes exist already)
_LAUNCH_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")
_SET_ENV: list[str] = []


class Repeat:
    """A row DistributedSampler repeated to even out the ranks: trained on with no label."""
    __slots__ = ("item",)

    def __init__(self, item):
        self.item = item


def world(spec) -> tuple[int, int, str]:
    """(devices per node, nodes, strategy) from the resolved spec. Read defensively: a spec from
    before multi-device training (or an unresolved `auto`) is one process."""
    hw = spec.hw
    devices, nodes = getattr(hw, "devices", 1), getattr(hw, "nodes", 1)
    devices = 1 if devices in (None, "auto") else int(devices)
    nodes = 1 if nodes in (None, "auto") else int(nodes)
    strategy = getattr(hw, "strategy", "auto") or "auto"
    if strategy == "auto":   # the planner resolves it; this is only what a bare spec means
        strategy = "single" if devices * nodes == 1 else \
            "fsdp2" if spec.lane.method == "full" else "ddp"
    if strategy not in STRATEGIES:
        raise ConfigError(f"`hw.strategy={strategy}` is not valid: it takes auto or one of "
                          f"{', '.join(STRATEGIES)}.", key="hw.strategy")
    if strategy == "single" and devices * nodes > 1:
        raise ConfigError(f"`hw.strategy=single` trains on one device, but hw.devices={devices} "
                          f"× hw.nodes={nodes} asks for {devices * nodes}: set hw.strategy=ddp "
                          f"(or fsdp2 for lane=full), or hw.devices=1.", key="hw.strategy")
    if strategy == "fsdp2" and spec.lane.method != "full":
        raise ConfigError(f"`hw.strategy=fsdp2` shards the full lane's weights; lane="
                          f"{spec.lane.name} trains an adapter on a replicated base: use "
                          f"hw.strategy=ddp.", key="hw.strategy")
    return devices, nodes, strategy


def world_size(spec) -> int:
    devices, nodes, _ = world(spec)
    return devices * nodes


def lightning_devices(spec, run_dir: Path | None = None) -> dict:
    """The Trainer's devices, num_nodes and strategy."""
    devices, nodes, strategy = world(spec)
    if strategy == "single":
        return {"devices": 1, "num_nodes": 1, "strategy": "auto"}
    classes = _strategy_classes()
    if strategy == "ddp":
        made = classes["ddp"](run_dir=run_dir)
    else:
        made = classes["fsdp2"](run_dir=run_dir, data_parallel_size=devices * nodes,
                                tensor_parallel_size=1)
    return {"devices": devices, "num_nodes": nodes, "strategy": made}


def rank_items(items: list, world_size: int, rank: int) -> list:
    """Rank `rank`'s rows in order: DistributedSampler(shuffle=False, drop_last=False), its
    padding marked as Repeat (see the module doc for why a repeat carries no label)."""
    if world_size == 1:
        return list(items)
    from torch.utils.data import DistributedSampler

    order = DistributedSampler(range(len(items)), num_replicas=world_size, rank=rank,
                               shuffle=False, drop_last=False)
    # the i-th index of rank r sits at position r + N·i of the padded list; past len(items) = a repeat
    return [items[j] if rank + world_size * i < len(items) else Repeat(items[j])
            for i, j in enumerate(order)]


def distributed() -> bool:
    import torch.distributed as dist
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def sum_over_ranks(values: list[float]) -> list[float]:
    """Element-wise sums over every rank (a collective: every rank calls it at the same point);
    the values themselves in one process."""
    if not distributed():
        return list(values)
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(v) for v in values], dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


def all_sum(t):
    """A tensor summed over ranks (autograd-free: for counts and logged numbers)."""
    if not distributed():
        return t
    import torch.distributed as dist

    t = t.detach().clone()
    dist.all_reduce(t)
    return t


def grad_norm_sharded(module) -> float | None:
    """The total gradient 2-norm when the gradients are FSDP2 shards (DTensors): the local
    shards' squares summed over ranks. None when no gradient is sharded (Lightning's own
    grad_norm then reads the replicated gradients)."""
    import torch

    grads = [p.grad for p in module.parameters() if p.grad is not None]
    if not any(hasattr(g, "to_local") for g in grads):
        return None
    # summed on the gradients' own device: a CPU accumulator beside CUDA gradients is an error
    # (found by the first CUDA sitting, where every training step stopped here)
    squares = [(g.to_local() if hasattr(g, "to_local") else g).detach().double().pow(2).sum()
               for g in grads]
    return float(all_sum(torch.stack(squares).sum()).sqrt())


def full_state_dict(model) -> dict:
    """The whole weights of an FSDP2-sharded model, on rank 0 (a collective; the other ranks
    get an empty dict)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                cpu_offload=True))


def share(summary: dict | None) -> dict | None:
    """Rank 0's summary on every rank (so each returns the same); one process: as it is."""
    if not distributed():
        return summary
    import torch.distributed as dist

    box = [summary]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def release() -> None:
    """The end of a run on every rank, however it ends: the process group closed and, in rank
    0, the launcher's environment cleared, so the next job of a `-m` sweep starts ranks of its
    own (with LOCAL_RANK set, Lightning would believe they exist already)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    while _SET_ENV:   # only what MensLauncher set (a torchrun/SLURM environment stays)
        os.environ.pop(_SET_ENV.pop(), None)


# --- the launcher ----------------------------------------------------------------------------

def child_command(run_dir: Path, local_rank: int) -> tuple[list[str], str | None]:
    """The command that starts rank `local_rank` of this run: this program again, as one run
    (never the sweep: a `-m` job's rank re-runs that job's overrides only), into the same run
    dir (Hydra's ${now:} could differ per rank), without a second .hydra/ record."""
    import __main__

    prog = [sys.executable, "-m", __main__.__spec__.name] if __main__.__spec__ is not None \
        else [sys.executable, os.path.abspath(sys.argv[0])]
    try:
        from hydra.core.hydra_config import HydraConfig
        hc = HydraConfig.get() if HydraConfig.initialized() else None
    except ImportError:
        hc = None
    if hc is None:   # not a Hydra app: re-run the command line as it is (Lightning's way)
        return [*prog, *sys.argv[1:]], None
    from hydra.utils import get_original_cwd

    # flags (--config-dir X, …) stay; the overrides are this job's own; -m goes
    flags = [a for a in sys.argv[1:] if a not in ("-m", "--multirun")
             and not ("=" in a and not a.startswith("-"))]
    return [*prog, *flags, *hc.overrides.task, f'hydra.run.dir="{run_dir}"',
            "hydra.output_subdir=null", f"hydra.job.name={hc.job.name}_rank{local_rank}"], \
        get_original_cwd()


def _launcher_class():
    from lightning.pytorch.strategies.launchers.subprocess_script import \
        _SubprocessScriptLauncher

    class MensLauncher(_SubprocessScriptLauncher):
        """Lightning's subprocess launcher (it re-runs the command per rank), with the command
        from child_command: Lightning's own re-runs a whole `-m` sweep in every rank and
        appends hydra.* keys a mens command may already carry. Ranks > 0 print nothing on
        stdout (rank 0 prints the plan and progress); their stderr stays visible."""
        run_dir: Path | None = None

        def _call_children_scripts(self) -> None:
            self._check_can_spawn_children()
            self.procs = []
            env = self.cluster_environment
            _SET_ENV.extend(v for v in _LAUNCH_ENV if v not in os.environ)
            os.environ.update({"MASTER_ADDR": env.main_address, "MASTER_PORT": str(env.main_port),
                               "NODE_RANK": str(env.node_rank()),
                               "LOCAL_RANK": str(env.local_rank()),
                               "WORLD_SIZE": str(self.num_processes * self.num_nodes)})
            run_dir = Path(self.run_dir or os.getcwd()).resolve()
            for local_rank in range(1, self.num_processes):
                command, cwd = child_command(run_dir, local_rank)
                child_env = {**os.environ, "LOCAL_RANK": str(local_rank),
                             RUN_DIR_ENV: str(run_dir)}
                self.procs.append(subprocess.Popen(command, env=child_env, cwd=cwd,
                                                   stdout=subprocess.DEVNULL))
    return MensLauncher


_CLASSES: dict = {}


def _strategy_classes() -> dict:
    """DDPStrategy / ModelParallelStrategy with MensLauncher (made lazily: lightning imports
    stay inside functions)."""
    if _CLASSES:
        return _CLASSES
    from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy

    launcher = _launcher_class()

    def with_launcher(base):
        class Strategy(base):
            def __init__(self, run_dir=None, **kw):
                super().__init__(**kw)
                self.mens_run_dir = run_dir

            def _configure_launcher(self) -> None:
                super()._configure_launcher()
                if type(getattr(self, "_launcher", None)).__name__ == "_SubprocessScriptLauncher":
                    env = self.cluster_environment
                    self._launcher = launcher(env, self.num_processes, self.num_nodes)
                    self._launcher.run_dir = self.mens_run_dir
        Strategy.__name__ = f"Mens{base.__name__}"
        return Strategy
    _CLASSES.update(ddp=with_launcher(DDPStrategy), fsdp2=with_launcher(ModelParallelStrategy))
    return _CLASSES
