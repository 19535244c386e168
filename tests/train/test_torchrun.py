"""torchrun is the contract (issue #41): real launchers on loopback with gloo, the tiny rung on CPU.

Two `torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d` processes act as two nodes;
each starts its own worker running `python -m mens …` (torchrun's console script is
torch.distributed.run's main, run here as `python -m torch.distributed.run` so the venv's own
is used). The same 2-row optimizer steps as one process with micro-batch 1 × accumulation 2
(token-weighted over ranks and micro-batches: REFERENCE.md, "Accumulation") must give the same
losses to 1e-6 and the same adapter. An elastic restart (--max-restarts=1, rank 1's worker
SIGKILLed after step 3's checkpoint; --rdzv-id and TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 as
mens asks) resumes and ends on the uninterrupted adapter. Two plain
`python -m mens` processes with SLURM's variables (no SLURM here) run under Lightning's
SLURMEnvironment and give the same losses.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launched_util import (COMMON, ONE, STEPS, TIMEOUT, adapter_gap, assert_same_losses,
                            clean_env, steps)
from mens.run.telemetry import read
from test_train_cli import mens

TWO_NODES = ["train.grad_accum=1", "hw.nodes=2", "hw.devices=1", "hw.strategy=ddp"]


def free_port(lo: int = 20000, hi: int = 30000) -> int:
    for port in range(lo, hi):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


class Group:
    """Processes this test started, each in its own session: waited for, and on the way out
    every one still running killed, its workers first (a torchrun and its worker)."""
    def __init__(self, cwd: Path):
        self.cwd, self.procs = cwd, []

    def start(self, argv: list[str], env: dict, name: str) -> subprocess.Popen:
        out, err = (open(self.cwd / f"{name}.{s}", "w") for s in ("out", "err"))
        p = subprocess.Popen(argv, cwd=self.cwd, env=env, stdout=out, stderr=err,
                             start_new_session=True)
        self.procs.append((p, name))
        return p

    def wait(self) -> None:
        deadline = time.time() + TIMEOUT
        for p, name in self.procs:
            rc = p.wait(max(deadline - time.time(), 1))
            assert rc == 0, f"{name} exit {rc}:\n" + self.log(name)

    def log(self, name: str) -> str:
        return "".join((self.cwd / f"{name}.{s}").read_text()[-3000:] for s in ("out", "err"))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        import psutil

        for p, _ in self.procs:
            if p.poll() is None:
                # torchrun's workers live in sessions of their own: killed by pid, then it
                try:
                    workers = psutil.Process(p.pid).children(recursive=True)
                except psutil.Error:
                    workers = []
                for w in workers:
                    try:
                        w.kill()
                    except psutil.Error:
                        pass
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def torchrun(group: Group, port: int, *extra: str, env: dict | None = None) -> None:
    for node in (0, 1):
        group.start([sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
                     "--nproc-per-node=1", "--rdzv-backend=c10d",
                     f"--rdzv-endpoint=127.0.0.1:{port}", *extra, "-m", "mens",
                     *COMMON, *TWO_NODES], clean_env(**(env or {})), f"node{node}")


def the_run(cwd: Path) -> Path:
    """The one run dir the launch made (rank 1 made none of its own)."""
    runs = [p for p in (cwd / "outputs").iterdir()]
    assert len(runs) == 1, runs
    return runs[0]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """One process, micro-batch 1 × accumulation 2: the same rows per step as two ranks."""
    tmp = tmp_path_factory.mktemp("one")
    res = mens(*COMMON, *ONE, f"hydra.run.dir={tmp / 'run'}", cwd=tmp, env=clean_env(),
               timeout=TIMEOUT)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return tmp / "run"


@pytest.mark.slow
def test_two_torchrun_nodes_match_one_process(reference, tmp_path):
    with Group(tmp_path) as group:
        torchrun(group, free_port())
        group.wait()
    run = the_run(tmp_path)
    assert run.name.startswith("torchrun-") and run.name.endswith("_train")
    assert_same_losses(run, reference)
    assert adapter_gap(run, reference) <= 1e-6
    # rank 0 alone wrote: one telemetry file, one adapter, one Hydra record and log, and
    # nothing outside the run dir but the test's own logs of the two torchruns
    assert [p.relative_to(tmp_path) for p in tmp_path.rglob("telemetry.jsonl")] == \
        [run.relative_to(tmp_path) / "telemetry.jsonl"]
    assert len(list(tmp_path.rglob("adapter_config.json"))) == 1
    assert [p.parent for p in tmp_path.rglob("config.yaml")] == [run / ".hydra"]
    assert list(tmp_path.rglob("*.log")) == [run / "train.log"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == \
        ["node0.err", "node0.out", "node1.err", "node1.out"]
    rows = read(run / "telemetry.jsonl")
    start = [r for r in rows if r["event"] == "TRAIN_START"]
    assert len(start) == 1 and start[0]["world_size"] == 2
    assert start[0]["launch"]["launcher"] == "torchrun" and start[0]["launch"]["nodes"] == 2
    summary = json.loads((run / "summary.json").read_text())
    assert summary["cluster_environment"] == "TorchElasticEnvironment"
    assert summary["world_size"] == 2 and summary["steps"] == STEPS


def kill_rank_1_after(run_parent: Path, group: Group, step: int) -> list[int]:
    """SIGKILL to the worker whose RANK is 1 once last.ckpt holds `step` (the CHECKPOINT row);
    returns the steps checkpointed by then."""
    import psutil

    deadline = time.time() + TIMEOUT
    while time.time() < deadline:
        tel = list(run_parent.glob("*/telemetry.jsonl"))
        rows = read(tel[0], strict=False) if tel else []   # rank 0 may be mid-row
        done = [r["step"] for r in rows if r["event"] == "CHECKPOINT"]
        if done and max(done) >= step:
            for p, _ in group.procs:
                for child in psutil.Process(p.pid).children(recursive=True):
                    try:
                        if child.environ().get("RANK") == "1":
                            child.send_signal(signal.SIGKILL)
                            return done
                    except psutil.Error:
                        continue
            raise AssertionError("no worker of rank 1 to kill (finished already?)")
        if any(p.poll() is not None for p, _ in group.procs):
            raise AssertionError("a torchrun ended before the kill:\n" + group.log("node0"))
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint of step {step} within {TIMEOUT} s")


@pytest.mark.slow
def test_an_elastic_restart_resumes_from_the_checkpoint(reference, tmp_path):
    """--rdzv-id names the launch across restarts; the agent's store unshared (without it the
    restarted group read the killed round's keys and hung: mens.train.launched)."""
    with Group(tmp_path) as group:
        torchrun(group, free_port(), "--max-restarts=1", f"--rdzv-id=elastic-{os.getpid()}",
                 env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})
        done = kill_rank_1_after(tmp_path / "outputs", group, 3)
        group.wait()
    assert max(done) < STEPS, done   # killed mid-run
    run = the_run(tmp_path)
    assert run.name == f"torchrun-elastic-{os.getpid()}_train"
    rows = read(run / "telemetry.jsonl")
    start = [r for r in rows if r["event"] == "TRAIN_START"]
    resumed = [r for r in rows if r["event"] == "RESUME"]
    # one launch: the restarted group found its own run by the launch's identity, and resumed
    assert len(start) == 1 and len(resumed) == 1
    assert resumed[0]["launch"]["id"] == start[0]["launch"]["id"]
    assert resumed[0]["world_size"] == 2
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == STEPS
    assert_same_losses(run, reference)
    assert adapter_gap(run, reference) <= 1e-6


@pytest.mark.slow
def test_a_slurm_environment_selects_lightnings_slurm_and_matches(reference, tmp_path):
    """srun's variables for 2 nodes × 1 task, no SLURM installed: plain `python -m mens`
    processes. No MASTER_PORT: Lightning derives it from the job id (15000 + its last 4
    digits), so the job id is chosen to give a free port."""
    port = free_port(16000, 24999)
    job = f"7{port - 15000:04d}"
    slurm = {"SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "2",
             "SLURM_LOCALID": "0", "SLURM_NODELIST": "127.0.0.1", "SLURM_JOB_ID": job,
             "SLURM_STEP_ID": "0"}
    with Group(tmp_path) as group:
        for rank in (0, 1):
            env = clean_env(**slurm, SLURM_PROCID=str(rank), SLURM_NODEID=str(rank))
            group.start([sys.executable, "-m", "mens", *COMMON, *TWO_NODES], env, f"task{rank}")
        group.wait()
    run = the_run(tmp_path)
    assert run.name == f"slurm-{job}.0_train"
    assert_same_losses(run, reference)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["cluster_environment"] == "SLURMEnvironment"
    start = [r for r in read(run / "telemetry.jsonl") if r["event"] == "TRAIN_START"]
    assert len(start) == 1 and start[0]["launch"]["launcher"] == "slurm"
