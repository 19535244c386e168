"""`mens launch ray`: run `python -m mens <the user's overrides>` on a Ray cluster — one Ray Train
worker per node (hw.nodes), each starting its node's hw.devices ranks — with Ray's own restart
machinery.

    mens launch ray +hw=h100 hw.nodes=2 hw.devices=8 +rung=8b lane=full \
        launch.ray_address=ray://head:10001 launch.max_restarts=2

Why Ray Train (a V2 `DataParallelTrainer`) and not actors in a placement group: the trainer
already owns the group's life — it places the workers (`ScalingConfig`), gives each its world
rank, local rank and node rank, tears the whole group down when one worker fails and starts it
again (`FailureConfig(max_failures=launch.max_restarts)`). Actors would mean writing that
supervision here. Why not `TorchTrainer`: its backend
opens a torch process group inside each Ray worker (NCCL: a CUDA context on every GPU) that the
training cannot use — Lightning opens its own in `python -m mens` — so the plain trainer is
enough.

Where the workers go (`share`, `strategy`): one worker per node holding that node's share of the
run — {"GPU": hw.devices} on a GPU tier (Ray gives the worker those GPUs as its
CUDA_VISIBLE_DEVICES, which LOCAL_RANK indexes), {"CPU": hw.devices} on a CPU one — in a
STRICT_SPREAD placement group when hw.nodes > 1. One worker per node and not per rank: no
placement strategy puts exactly hw.devices workers on each node. STRICT_SPREAD and not SPREAD:
SPREAD is best effort and stacks two bundles on one node when it must — two nodes' ranks on one
node, where mens exits 2 in each ("2 per node on 1 node"); strict, such a group is not placed
and the bounded wait below says so.

Before any worker starts, the cluster is asked (`check_cluster`): its alive nodes against the
request — hw.nodes nodes each holding one share; one that can never hold it exits 2 naming
both (Ray would wait for ever, printing its retries). Then the group's placement is reserved
for at most launch.ray_wait_s (`reserve`: a busy cluster, nodes still joining); past it, exit 4
saying what was free. Ray Train's own wait at each (re)start is bounded alike
(RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S, and no controller retries). With launch.ray_address
unset (and no RAY_ADDRESS, which Ray reads itself: `ray job submit` sets it) Ray starts a
throwaway local cluster of this machine alone, which is said — loudly for a GPU run: its one
node and this machine's GPUs are all it has, and the check compares the run with them.

Each worker is a launcher and nothing more (`worker`): for each of its node's ranks it sets
torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK;
MASTER_ADDR/MASTER_PORT of node 0 and a port free there, shared with
`ray.train.collective.broadcast_from_rank_zero`) and runs the ordinary entry point as a
subprocess — mens.train.launched takes the world from there, checks it against
hw.nodes/hw.devices, and rank 0 alone writes the run dir — then, when one rank exits non-zero,
kills its node's others and raises, so that Ray restarts the group. A restarted group finds the
run dir's last.ckpt (rank 0 looks, all follow) and runs `python -m mens resume=<run dir>`:
mens's own resume, in place. Each rank dies with its worker (PR_SET_PDEATHSIG), so a group Ray
tears down leaves no rank training on. Checkpoints stay where the run dir says (its
checkpoints/; Ray's own records go to <run dir>/ray), so the run dir must be on storage every
node mounts, as under torchrun or SLURM (Ray's storage_path must be too). The driver reads rank 0's telemetry back from it (`said`).

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
import time
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
# Ray Train's own bound on placing a worker group (read by its controller, which the trainer
# hands this variable from the driver's environment)
START_TIMEOUT_ENV = "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"


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
            "cwd": os.getcwd(), "nodes": launch.nodes, "per_node": launch.devices,
            "gpu": launch.gpu, "hw": str(launch.cfg.hw.name),
            "max_failures": int(lc.max_restarts), "address": address,
            "wait_s": float(lc.ray_wait_s)}


def share(job: dict) -> dict:
    """What one node's worker reserves: its ranks' devices (one rank per device)."""
    return {"GPU" if job["gpu"] else "CPU": job["per_node"]}


def strategy(job: dict) -> str:
    """One worker per node, each on a node of its own (see the module doc: never SPREAD)."""
    return "STRICT_SPREAD" if job["nodes"] > 1 else "PACK"


def check_cluster(nodes: list[dict], job: dict, where: str) -> None:
    """The cluster's alive nodes (ray.nodes()) against the request: exit 2 naming both when no
    hw.nodes of them can each hold one share, which no wait would change."""
    alive = [n for n in nodes if n.get("Alive")]
    need = share(job)
    (res, per), = need.items()
    holders = [n for n in alive if n["Resources"].get(res, 0) >= per]
    if len(holders) >= job["nodes"]:
        return
    has = "; ".join(f"{n.get('NodeManagerAddress', '?')}: {n['Resources'].get('CPU', 0):g} CPU, "
                    f"{n['Resources'].get('GPU', 0):g} GPU" for n in alive[:4])
    has += "; …" if len(alive) > 4 else ""
    most = max((int(n["Resources"].get(res, 0)) for n in alive), default=0)
    if most:
        fit = sum(1 for n in alive if n["Resources"].get(res, 0) >= most)
        fix = (f"ask for what it holds (hw.nodes={min(fit, job['nodes'])} "
               f"hw.devices={most})")
    else:
        fix = "use the cpu tier (+hw=cpu)" if res == "GPU" else "add nodes to it"
    raise ConfigError(
        f"the Ray cluster {where} has {len(alive)} node{'s' if len(alive) != 1 else ''} ({has}), "
        f"and this run asks for {job['nodes']} node(s) × {per} {res}(s) each (hw.nodes="
        f"{job['nodes']}, hw.devices={per} on hw={job['hw']}: one rank per device, each node "
        f"its own): {len(holders)} of its nodes can hold a node's share. Run it on a cluster "
        f"that has them (launch.ray_address=host:port), or {fix}.",
        key="hw.nodes" if len(alive) < job["nodes"] else "hw.devices")


def reserve(job: dict) -> None:
    """The group's placement, waited for at most launch.ray_wait_s, then given back for Ray
    Train to take: past the wait, exit 4 saying what the cluster had free."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    started = time.monotonic()
    pg = placement_group([share(job)] * job["nodes"], strategy=strategy(job))
    try:
        if not pg.wait(timeout_seconds=job["wait_s"]):
            free = ray.available_resources()
            raise RunFailed(
                f"the Ray cluster did not place {job['nodes']} × {share(job)} ({strategy(job)}) "
                f"within launch.ray_wait_s={job['wait_s']:g} s: its nodes can hold it, but not "
                f"now (free: {free.get('CPU', 0):g} CPU, {free.get('GPU', 0):g} GPU) — other "
                f"work holds them, or nodes are still joining. Launch again later, or wait "
                f"longer (launch.ray_wait_s=…).")
    finally:
        remove_placement_group(pg)
    print(f"mens launch ray: placed in {time.monotonic() - started:.1f} s", flush=True)


def execute(job: dict) -> int:
    """Start the workers on the cluster and wait for them; rank 0's summary printed."""
    try:
        import ray
        from ray.train import FailureConfig, RunConfig, ScalingConfig, TrainingFailedError
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    except ImportError as e:   # ray without its train extra
        raise ConfigError(f"`mens launch ray` needs Ray Train ({e}): pip install "
                          f"'mens-compiler[ray]'.") from None

    env = propagated(dict(os.environ))
    if job["address"] is None and not os.environ.get("RAY_ADDRESS"):
        print("mens launch ray: note: launch.ray_address is unset — starting a throwaway local "
              "Ray cluster of this machine alone for this run" + (
                  ": a GPU run on it has this machine's GPUs and one node, no more (a cluster: "
                  "launch.ray_address=host:port)" if job["gpu"] else ""), file=sys.stderr,
              flush=True)
        ray.init(address="local", runtime_env={"env_vars": env}, include_dashboard=False)
    else:   # the address, or RAY_ADDRESS (Ray reads it itself)
        ray.init(address=job["address"], runtime_env={"env_vars": env})
    try:
        where = f"at {ray.get_runtime_context().gcs_address}"
        check_cluster(ray.nodes(), job, where)   # never holds it: exit 2
        reserve(job)                               # not free within the wait: exit 4
        print(f"mens launch ray: {job['nodes']} node(s) × {job['per_node']} rank(s) {where}, "
              f"run dir {job['run_dir']}", flush=True)
        os.environ[START_TIMEOUT_ENV] = str(job["wait_s"])
        trainer = DataParallelTrainer(
            worker, train_loop_config=job,
            scaling_config=ScalingConfig(num_workers=job["nodes"], use_gpu=job["gpu"],
                                         resources_per_worker=share(job),
                                         placement_strategy=strategy(job)),
            run_config=RunConfig(name="ray", storage_path=job["run_dir"], failure_config=(
                FailureConfig(max_failures=job["max_failures"], controller_failure_limit=0))))
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
    """One node, in a Ray worker: its ranks' torchrun variables, then `python -m mens` for
    each; one failing kills the node's others and fails the group (see the doc)."""
    import socket

    import ray.train
    from ray.train.collective import broadcast_from_rank_zero

    from mens.run.rundir import RunDir

    ctx = ray.train.get_context()
    node, per_node = ctx.get_world_rank(), job["per_node"]   # one worker per node
    run = RunDir(job["run_dir"])
    agreed = None
    if node == 0:   # this attempt's rendezvous and whether it resumes, decided once
        addr = ray.util.get_node_ip_address()
        with socket.socket() as s:   # a port free on node 0 now (rank 0's store binds it)
            s.bind((addr, 0))
            port = s.getsockname()[1]
        agreed = {"addr": addr, "port": port,
                  "resume": run.last_checkpoint.is_file(), "finished": run.finished}
    agreed = broadcast_from_rank_zero(agreed)
    if agreed["finished"]:   # a group restarted after rank 0 wrote the summary: done
        return
    argv = [f"resume={run.path}"] if agreed["resume"] else job["overrides"]
    base = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN)}
    base.update(WORLD_SIZE=str(ctx.get_world_size() * per_node),
                LOCAL_WORLD_SIZE=str(per_node), NODE_RANK=str(node),
                MASTER_ADDR=agreed["addr"], MASTER_PORT=str(agreed["port"]))
    cwd = job["cwd"] if Path(job["cwd"]).is_dir() else None
    ranks = {node * per_node + local: subprocess.Popen(
        [sys.executable, "-m", "mens", *argv], cwd=cwd, preexec_fn=_die_with_parent,
        env={**base, "RANK": str(node * per_node + local), "LOCAL_RANK": str(local)})
        for local in range(per_node)}
    _wait(ranks)


def _wait(ranks: dict[int, subprocess.Popen]) -> None:
    """Until every rank exits 0; the first that does not kills the others (their group is
    broken: they would wait in a collective for it) and fails this worker."""
    while ranks:
        for rank, p in list(ranks.items()):
            rc = p.poll()
            if rc is None:
                continue
            del ranks[rank]
            if rc != 0:
                for other in ranks.values():
                    other.kill()
                    other.wait()
                raise RuntimeError(f"rank {rank}: `python -m mens` exited {rc}")
        time.sleep(0.2)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the Ray worker that started it dies (Linux)."""
    import ctypes
    import signal

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
