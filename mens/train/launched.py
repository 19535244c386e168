"""A world some launcher already set: torchrun is the contract.

    torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT \
        -m mens +hw=h100 hw.nodes=2 hw.devices=8 …
    srun python -m mens … (sbatch --nodes=2 --ntasks-per-node=8)

When a launcher started the ranks (torchrun or any torch.distributed.elastic agent, SLURM's
srun, or anything else that sets RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR), mens starts none:
Lightning takes its world from the same variables (TorchElasticEnvironment, SLURMEnvironment —
both create processes externally, so the strategy gets no subprocess launcher), and
`hw.nodes`/`hw.devices` are expectations checked against it (`expect`: exit 2 naming both).
The detection follows Lightning's order (torchelastic first, then SLURM outside an interactive
`bash`/`interactive` job), so mens and Lightning never disagree about who launched.

The run dir is agreed without talking: every rank, and every elastic restart, derives it from
the launch (`default_run_dir`) unless `hydra.run.dir` names it. Rank 0 alone writes there (the
others get `hydra.output_subdir=null` and no log file); a restart cannot ask the rank 0 that
died, which is why the name is derived and not broadcast. A launch is told apart by its
identity (`Launched.launch_id`): torchrun's `--rdzv-id` (a uuid under --standalone and on one
node), SLURM's job and step (a requeued job keeps them). A dir trained by the same launch with a
checkpoint is resumed (`attempt`); one trained by another launch is refused (exit 2).
torchrun's own TORCHELASTIC_RESTART_COUNT cannot decide this: it counts one agent's restarts,
and the agent whose worker did not fail restarts it with the count still 0 (seen here, two-node
c10d). With torchrun's default `--rdzv-id` (the word "none") the launch is named by its store's
address, which lasts one rendezvous round only: fine without restarts, so `--max-restarts`
asks for a real `--rdzv-id` (`check_restarts`, exit 2).

Restarts also need TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in torchrun's environment: with the
store the agent shares with its workers (the default since torch 2.4), a restarted group reads
the previous round's keys — seen here: rank 0 dialled the killed rank 1's old gloo address and
rank 1 hung in init (pytorch/pytorch#135712). mens cannot fix that from inside a worker, so it
refuses the combination before training rather than hang at the first restart.
"""
from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from mens.errors import ConfigError

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")
# what each launcher calls the two numbers hw.nodes and hw.devices must match
FLAGS = {"torchrun": ("--nnodes", "--nproc-per-node"),
         "slurm": ("--nodes", "--ntasks-per-node"),
         "env": ("NODE count", "LOCAL_WORLD_SIZE")}


@dataclass(frozen=True)
class Launched:
    launcher: str             # torchrun | slurm | env (a launcher that set torchrun's variables)
    rank: int                 # global rank
    world_size: int
    per_node: int | None      # processes per node (None: the launcher did not say)
    nodes: int | None
    launch_id: str | None     # the same in every rank and every restart of one launch
    max_restarts: int = 0     # torchrun --max-restarts
    shared_store: bool = False   # torchrun's workers use its agent's store (TCPStore sharing)

    @property
    def label(self) -> str:
        return {"torchrun": "torchrun", "slurm": "SLURM (srun)"}.get(self.launcher,
                                                                    "the launcher")

    def record(self) -> dict:
        """What telemetry keeps of it (TRAIN_START, RESUME)."""
        return {"launcher": self.launcher, "id": self.launch_id, "world_size": self.world_size,
                "nodes": self.nodes, "per_node": self.per_node}


def launched(env: Mapping[str, str] | None = None) -> Launched | None:
    """The launcher's world, or None when mens itself starts the ranks (or there is one)."""
    env = os.environ if env is None else env
    if env.get("TORCHELASTIC_RUN_ID") is not None:   # torch.distributed.is_torchelastic_launched
        run_id = env["TORCHELASTIC_RUN_ID"]
        return Launched("torchrun", _int(env, "RANK") or 0, _int(env, "WORLD_SIZE") or 1,
                        _int(env, "LOCAL_WORLD_SIZE"), _int(env, "GROUP_WORLD_SIZE"),
                        run_id if run_id != "none" else
                        f"none@{env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}",
                        _int(env, "TORCHELASTIC_MAX_RESTARTS") or 0,
                        env.get("TORCHELASTIC_USE_AGENT_STORE") == "True")
    if "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME") not in ("bash", "interactive"):
        world = _int(env, "SLURM_NTASKS") or 1
        nodes = _int(env, "SLURM_NNODES") or _int(env, "SLURM_JOB_NUM_NODES")
        per_node = _int(env, "SLURM_NTASKS_PER_NODE") or (
            world // nodes if nodes and world % nodes == 0 else None)
        job = env.get("SLURM_JOB_ID")
        return Launched("slurm", _int(env, "SLURM_PROCID") or 0, world, per_node, nodes,
                        f"{job}.{env.get('SLURM_STEP_ID', '0')}" if job else None)
    if all(v in env for v in TORCHRUN_VARS):
        world, per_node = _int(env, "WORLD_SIZE") or 1, _int(env, "LOCAL_WORLD_SIZE")
        nodes = world // per_node if per_node and world % per_node == 0 else None
        return Launched("env", _int(env, "RANK") or 0, world, per_node, nodes, None)
    return None


def _int(env: Mapping[str, str], name: str) -> int | None:
    v = env.get(name)
    try:
        return int(v) if v not in (None, "") else None
    except ValueError:
        return None


def expect(cfg, world: Launched) -> None:
    """hw.nodes and hw.devices checked against the launcher's world, in place: hw.devices=auto
    takes the launcher's processes per node. A mismatch is exit 2 naming both."""
    from mens.config.schema import AUTO

    hw = cfg.hw
    per_node = world.per_node
    if per_node is None and world.nodes:
        per_node = world.world_size // world.nodes
    if hw.devices in (None, AUTO):
        hw.devices = per_node if per_node else max(world.world_size // int(hw.nodes), 1)
    devices, nodes = int(hw.devices), int(hw.nodes)
    node_flag, device_flag = FLAGS[world.launcher]
    got = (f"{world.world_size} process{'es' if world.world_size != 1 else ''}"
           + (f" ({per_node} per node on {world.nodes} node{'s' if world.nodes != 1 else ''})"
              if per_node and world.nodes else ""))
    wrong = []
    if world.nodes is not None and nodes != world.nodes:
        wrong.append(("hw.nodes", nodes, world.nodes, node_flag))
    if per_node is not None and devices != per_node:
        wrong.append(("hw.devices", devices, per_node, device_flag))
    if not wrong and devices * nodes != world.world_size:
        wrong.append(("hw.devices", devices, world.world_size // max(nodes, 1), device_flag))
    if wrong:
        said = " and ".join(f"{k}={v}" for k, v, _, _ in wrong)
        fix = " ".join(f"{k}={w}" for k, _, w, _ in wrong)
        flags = " ".join(f"{f}={v}" for _, v, _, f in wrong)
        raise ConfigError(
            f"{world.label} started {got}, but this run says {said}: when a launcher sets the "
            f"world, hw.nodes and hw.devices (per node) are what it must match — mens starts no "
            f"process of its own. Set {fix} (hw.devices=auto takes the launcher's), or launch "
            f"with {flags}.", key=wrong[0][0])


def default_run_dir(world: Launched, name: str) -> str:
    """outputs/<launcher>-<id>_<name>: the same in every rank and restart of one launch."""
    if world.launcher == "torchrun":
        # torchrun's default --rdzv-id is the word "none": the store's address names the launch
        ident = world.launch_id.removeprefix("none@").replace(":", "-")
    elif world.launcher == "slurm" and world.launch_id:
        ident = world.launch_id
    else:
        raise ConfigError(
            f"{world.label} set RANK/WORLD_SIZE but no job id mens can name a run dir by (no "
            f"TORCHELASTIC_RUN_ID, no SLURM_JOB_ID), and every rank must write into the same "
            f"one: set hydra.run.dir=<a path every rank sees>.", key="hydra.run.dir")
    return f"outputs/{world.launcher}-{re.sub(r'[^A-Za-z0-9._-]+', '_', ident)}_{name}"


def check_restarts(world: Launched) -> None:
    """torchrun --max-restarts resumes only with a job id that outlives a round and with the
    agent's store unshared (see the module doc): exit 2 naming the fix, before training."""
    if world.launcher != "torchrun" or not world.max_restarts:
        return
    if world.launch_id.startswith("none@"):
        raise ConfigError(
            f"torchrun --max-restarts={world.max_restarts} without --rdzv-id: a restarted group "
            f"finds its run by the launch's job id, and torchrun's default names none. Launch "
            f"with --rdzv-id=<an id unique to this job> (--standalone picks one).",
            key="--rdzv-id")
    if world.shared_store:
        raise ConfigError(
            f"torchrun --max-restarts={world.max_restarts} with the store its agent shares with "
            f"the workers (torch's default): a restarted group reads the previous round's keys "
            f"and hangs or dials a dead rank (pytorch/pytorch#135712). Set "
            f"TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in torchrun's environment.",
            key="TORCH_DISABLE_SHARE_RDZV_TCP_STORE")


def hydra_args(argv: list[str], name: str, world: Launched | None = None) -> list[str]:
    """The command line of a launched rank: the agreed run dir (unless the user named one or
    resumes one), and for ranks > 0 no .hydra/ record and no log file (rank 0 owns the dir).
    A `-m` sweep under a launcher of several processes is refused: they start one run."""
    world = launched() if world is None else world
    if world is None:
        return argv
    if any(a in ("-m", "--multirun") for a in argv):
        if world.world_size > 1:
            raise ConfigError(
                f"{world.label} started {world.world_size} processes for one run, and -m asks "
                f"each of them for a sweep: drop -m and launch one run per job, or sweep with "
                f"hydra/launcher=mens_slurm, which starts each job's ranks itself.", key="-m")
        return argv
    check_restarts(world)
    argv = list(argv)
    # one SLURM task (`python -m mens` in an sbatch script, no srun) has no ranks to agree
    # with: Hydra's dated dir, as without a launcher
    agree = world.world_size > 1 or world.launcher == "torchrun"
    if agree and not any(a.startswith(("hydra.run.dir=", "resume=")) for a in argv):
        argv.append(f"hydra.run.dir={default_run_dir(world, name)}")
    if world.rank > 0:
        for extra in ("hydra.output_subdir=null", "hydra/job_logging=none",
                      "hydra/hydra_logging=none"):
            if not any(a.startswith(extra.split("=")[0] + "=") for a in argv):
                argv.append(extra)
    return argv


@contextlib.contextmanager
def rank_output(world: Launched | None):
    """Where a rank's stdout goes while it trains: rank 0 (or a process no launcher started)
    prints the plan and the outcome; a rank > 0 prints nothing there, so the launch's output
    reads as one run's (its stderr, where errors go, stays visible)."""
    if world is None or world.rank == 0:
        yield
        return
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        yield


def attempt(run_dir: Path, world: Launched) -> bool:
    """Whether this launch resumes `run_dir` (True) or starts it (False): the same launch with
    a checkpoint resumes — an elastic restart; another launch's run is refused (exit 2)."""
    from mens.run.rundir import RunDir
    from mens.run.telemetry import Event

    run = RunDir(run_dir)
    if not run.is_run or world.launch_id is None:
        return False
    ours = any((r.get("launch") or {}).get("id") == world.launch_id
               for r in run.telemetry_rows() if r.get("event") in (Event.TRAIN_START,
                                                                   Event.RESUME))
    if not ours or run.finished:
        state = "finished" if run.finished else "unfinished"
        raise ConfigError(
            f"{run} already holds a {state} run{'' if ours else ' of another launch'}, and "
            f"{world.label} (launch {world.launch_id}) would train into it again: name a new "
            f"run dir (hydra.run.dir=…, or a new --rdzv-id), or continue that run with "
            f"resume={run}.", key="hydra.run.dir")
    return run.last_checkpoint.is_file()
