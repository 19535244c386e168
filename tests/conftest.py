"""Shared fixtures: compose real configs with Hydra's compose API; run mens commands for real."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent   # the repository

# A test run started in the background by a non-interactive shell (`make test &`, nohup)
# inherits SIGINT ignored, and so would every mens child it starts: the Ctrl-C tests would
# then see exit 0. Python's own handler here makes children start with the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def compose():
    from mens.config.compose import compose as _compose
    return _compose


@pytest.fixture
def compile_run(compose):
    from mens.plan.spec import compile_run as _compile

    def run(*overrides, purpose="plan"):
        return _compile(compose(list(overrides)), purpose)
    return run


@pytest.fixture
def mens_cli(tmp_path):
    """Run `python -m <module> args` as a user would; returns CompletedProcess."""
    def run(module: str, *args: str, env: dict | None = None, cwd: Path | None = None):
        full_env = {**os.environ, **(env or {})}
        full_env.pop("HYDRA_FULL_ERROR", None) if not (env or {}).get("HYDRA_FULL_ERROR") else None
        return subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                              text=True, cwd=cwd or tmp_path, env=full_env, timeout=900)
    return run


from train_util import FAST_TRAIN  # noqa: E402  (the shape every real training here uses)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """One real tiny LoRA run dir (spec.yaml, plan.json, telemetry, adapter/, summary.json),
    trained once per test session and shared by the export / serve / compare tests. Treat it as
    read-only: copy it before changing anything in it. lr 1e-3 so the adapter clearly moves."""
    from mens.config.compose import compose
    from mens.plan.output import plan_run
    from mens.train.run import train_run

    out = tmp_path_factory.mktemp("tiny_run")
    cfg = compose([*FAST_TRAIN, "train.max_steps=10", "lane.optimizer.lr=1e-3"])
    spec, plan = plan_run(cfg, out, "train")
    train_run(spec, plan, out)
    return out
