"""Sweeps through other launchers: Hydra's submitit_local (the SLURM launcher's code path, with
local processes) and a `-m` sweep whose jobs each train on 2 processes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from train_util import FAST_TRAIN
from mens.run.telemetry import read


def mens(*args, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.run([sys.executable, "-m", "mens", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def outcomes(sweep: Path) -> dict[str, int]:
    return {p.parent.name: json.loads(p.read_text())["exit_code"]
            for p in sweep.glob("*/outcome.json")}


@pytest.mark.slow   # in `make test-slow` (CI runs it): keeps `make test` near 20 min
def test_a_training_sweep_runs_through_submitit(tmp_path):
    """Two jobs train, each in a submitit process of its own; a third is a bad config (exit 2).
    The parent reads the jobs' outcome files (its callbacks never saw the jobs) and exits 2."""
    sweep = tmp_path / "sweep"
    res = mens("-m", "hydra/launcher=submitit_local", *FAST_TRAIN, "train.max_steps=1",
               "train.eval_max_records=2", "train.seq_len=128,256,99999",
               f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert res.returncode == 2, res.stdout[-3000:] + res.stderr[-3000:]
    assert outcomes(sweep) == {"0": 0, "1": 0, "2": 2}
    assert "3 jobs, 2 ok, 1 not ok" in res.stdout
    assert (sweep / ".submitit").is_dir()                       # submitit ran them
    for job, seq in (("0", 128), ("1", 256)):
        s = json.loads((sweep / job / "summary.json").read_text())
        assert s["steps"] == 1 and (sweep / job / "adapter").is_dir()
        spec = (sweep / job / "spec.yaml").read_text()
        assert f"seq_len: {seq}" in spec
        assert os.getpid() not in {r.get("pid") for r in read(sweep / job / "telemetry.jsonl")}


@pytest.mark.slow
def test_a_sweep_whose_jobs_train_on_two_processes(tmp_path):
    """Each job of a `-m` sweep starts its own 2 ranks (ddp), and the next job starts afresh."""
    sweep = tmp_path / "sweep"
    res = mens("-m", *FAST_TRAIN, "hw.devices=2", "train.micro_batch=2", "train.max_steps=2",
               "train.eval_max_records=2",
               "train.seq_len=512", "spoke=vox_lang,mcp_tool_chain", f"hydra.sweep.dir={sweep}",
               cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert outcomes(sweep) == {"0": 0, "1": 0}
    for job in ("0", "1"):
        s = json.loads((sweep / job / "summary.json").read_text())
        assert (s["world_size"], s["strategy"], s["steps"]) == (2, "ddp", 2)
