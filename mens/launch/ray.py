"""`mens launch ray`: run `python -m mens <the user's overrides>` on a Ray cluster, one worker per
rank (hw.nodes × hw.devices), with Ray's own restart machinery.

    mens launch ray +hw=h100 hw.nodes=2 hw.devices=8 +rung=8b lane=full \
        launch.ray_address=ray://head:10001 launch.max_restarts=2

Why Ray Train (a V2 `DataParallelTrainer`) and not actors in a placement group: the trainer
already owns the group's life — it places the workers (`ScalingConfig`), gives each its world
rank, local rank and node rank, tears the whole group down when one worker fails and starts it
again (`FailureConfig(max_failures=launch.max_restarts)`). Actors would mean writing that
supervision here. Why not `TorchTrainer`: its backend
opens a torch process group inside each Ray worker (NCCL: a CUDA context on every GPU) that the
training cannot use — Lightning opens its own in `python -m mens` — so the plain trainer with a
backend that only shares each node's CUDA_VISIBLE_DEVICES (as TorchTrainer's does) is enough.

Each worker is a launcher and nothing more (`worker`): it sets torchrun's variables (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK; MASTER_ADDR/MASTER_PORT of rank 0's node and
a port free there, shared with `ray.train.collective.broadcast_from_rank_zero`) and runs the
ordinary entry point as a subprocess — mens.train.launched takes the world from there, checks it
against hw.nodes/hw.devices, and rank 0 alone writes the run dir — then raises on a non-zero
exit, so that Ray restarts the group. A restarted group finds the run dir's last.ckpt (rank 0
looks, all follow) and runs `python -m mens resume=<run dir>`: mens's own resume, in place.
The subprocess dies with its worker (PR_SET_PDEATHSIG), so a group Ray tears down leaves no rank
training on. Checkpoints stay where the run dir says (its checkpoints/; Ray's own records go to
<run dir>/ray), so the run dir must be on storage every node mounts, as under torchrun or SLURM
(Ray's storage_path must be too). The driver reads rank 0's telemetry back from it (`said`).

The driver passes NCCL/IB/gloo settings (`propagated`) to every worker through the job's
runtime_env; secrets (HF_TOKEN, WANDB_API_KEY) are not among them — a runtime_env is kept in
the cluster's records, so the cluster's nodes must hold those themselves. Ray is an optional
extra (`pip install 'mens-compiler[ray]'`) imported only here, only when a run starts.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from mens.errors import ConfigError, RunFailed
from mens.launch.common import Launch

# the environment of the collectives, read by NCCL/gloo in every rank: NCCL_* (NCCL_IB_HCA,
# NCCL_SOCKET_IFNAME, ...), torch's TORCH_NCCL_*, GLOO_SOCKET_IFNAME, and the InfiniBand / EFA
# transports under them (UCX_*, FI_* of libfabric)
PROPAGATE = ("NCCL_", "TORCH_NCCL_", "GLOO_", "UCX_", "FI_")
# another launcher's variables a Ray worker may inherit (a Ray cluster started inside a SLURM
# job, a torchrun): left in, they would tell mens and Lightning that launcher set the world
FOREIGN = ("SLURM_", "TORCHELASTIC_", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_", "LOCAL_WORLD_SIZE")
_ADDRESS = re.compile(r"^(auto|ray://[^\s:/]+:\d+|[^\s:/]+:\d+)$")


def propagated(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(PROPAGATE)}


def prepare(launch: Launch) -> dict:
    """What every worker needs, checked before any plan or Ray (config errors: exit 2)."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:   # found, not imported: --help and plans stay light
        raise ConfigError("`mens launch ray` needs Ray Train, which is not installed: pip install "
                          "'mens-compiler[ray]'.")
    lc = launch.cfg.launch
    address = lc.ray_address
    if address is not None and not _ADDRESS.match(str(address)):
        raise ConfigError(
            f"launch.ray_address={address}: expected the address of a running Ray cluster — "
            f"host:port of its GCS (head:6379), ray://host:port of its client server "
            f"(ray://head:10001) or auto (the cluster `ray start` began on this machine); "
            f"leave it unset for a local Ray started for this run.", key="launch.ray_address")
    return {"overrides": launch.overrides(), "run_dir": str(launch.out_dir),
            "cwd": os.getcwd(), "workers": launch.nodes * launch.devices, "gpu": launch.gpu,
            "max_failures": int(lc.max_restarts), "address": address}


def execute(job: dict) -> int:
    """Start the workers on the cluster and wait for them; rank 0's summary printed."""
    try:
        import ray
        from ray.train import (BackendConfig, FailureConfig, RunConfig, ScalingConfig,
                               TrainingFailedError)
        from ray.train.backend import Backend
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    except ImportError as e:   # ray without its train extra
        raise ConfigError(f"`mens launch ray` needs Ray Train ({e}): pip install "
                          f"'mens-compiler[ray]'.") from None

    class SharedGPUs(Backend):
        # each worker sees its node's GPUs, so that LOCAL_RANK indexes them (TorchTrainer's too)
        share_cuda_visible_devices = True

    class SharedGPUsConfig(BackendConfig):
        @property
        def backend_cls(self):
            return SharedGPUs

    env = propagated(dict(os.environ))
    if job["address"] is None:   # a local cluster for this run, on this machine's CPUs/GPUs
        ray.init(runtime_env={"env_vars": env}, include_dashboard=False)
    else:
        ray.init(address=job["address"], runtime_env={"env_vars": env})
    print(f"mens launch ray: {job['workers']} worker(s) on {ray.get_runtime_context().gcs_address}"
          f", run dir {job['run_dir']}", flush=True)
    trainer = DataParallelTrainer(
        worker, train_loop_config=job, backend_config=SharedGPUsConfig(),
        scaling_config=ScalingConfig(num_workers=job["workers"], use_gpu=job["gpu"]),
        run_config=RunConfig(name="ray", storage_path=job["run_dir"],
                             failure_config=FailureConfig(max_failures=job["max_failures"])))
    try:
        trainer.fit()   # its Result holds metrics only of reported checkpoints: none here
    except TrainingFailedError as e:
        raise RunFailed(f"the Ray workers failed (launch.max_restarts={job['max_failures']} "
                        f"restarts spent): {e}. The run dir {job['run_dir']} keeps the last "
                        f"checkpoint; `python -m mens resume={job['run_dir']}` continues it.")
    finally:
        ray.shutdown()
    return said(job["run_dir"])


def said(run_dir: str) -> int:
    """Rank 0's telemetry, read back from the run dir (Ray's storage_path: the driver sees it
    too): the summary and how often the group resumed."""
    from mens.run.rundir import RunDir
    from mens.run.telemetry import Event

    run = RunDir(run_dir)
    if not run.finished:
        raise RunFailed(f"the Ray workers ended without {run.summary}: see their output above.")
    summary = run.read_summary()
    resumed = len(run.telemetry_rows(Event.RESUME))
    keys = ("steps", "world_size", "cluster_environment", "eval_loss_adapter",
            "eval_improvement_pct", "tokens_per_sec")
    print(f"mens launch ray: finished {run} (resumed {resumed}× from last.ckpt): " +
          " ".join(f"{k}={summary[k]}" for k in keys if summary.get(k) is not None), flush=True)
    return 0


def worker(job: dict) -> None:
    """One rank, in a Ray worker: torchrun's variables, then `python -m mens` (see the doc)."""
    import socket

    import ray.train
    from ray.train.collective import broadcast_from_rank_zero

    from mens.run.rundir import RunDir

    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    run = RunDir(job["run_dir"])
    agreed = None
    if rank == 0:   # this attempt's rendezvous and whether it resumes, decided once
        addr = ray.util.get_node_ip_address()
        with socket.socket() as s:   # a port free on rank 0's node now (the store binds it)
            s.bind((addr, 0))
            port = s.getsockname()[1]
        agreed = {"addr": addr, "port": port,
                  "resume": run.last_checkpoint.is_file(), "finished": run.finished}
    agreed = broadcast_from_rank_zero(agreed)
    if not agreed["finished"]:   # a group restarted after rank 0 wrote the summary: done
        argv = ([f"resume={run.path}"] if agreed["resume"] else job["overrides"])
        env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN)}
        env.update(RANK=str(rank), WORLD_SIZE=str(ctx.get_world_size()),
                   LOCAL_RANK=str(ctx.get_local_rank()),
                   LOCAL_WORLD_SIZE=str(ctx.get_local_world_size()),
                   NODE_RANK=str(ctx.get_node_rank()), MASTER_ADDR=agreed["addr"],
                   MASTER_PORT=str(agreed["port"]))
        cwd = job["cwd"] if Path(job["cwd"]).is_dir() else None
        rc = subprocess.Popen([sys.executable, "-m", "mens", *argv], env=env, cwd=cwd,
                              preexec_fn=_die_with_parent).wait()
        if rc != 0:
            raise RuntimeError(f"rank {rank}: `python -m mens` exited {rc}")


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the Ray worker that started it dies (Linux)."""
    import ctypes
    import signal

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
