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


# The longest files first (seconds measured on 2 cores, 2026-12-02): pytest-xdist's loadfile
# hands files to whichever worker is free in collection order, and a long file picked up last
# leaves the other worker idle at the end (longest-first scheduling). Order within a file, and of
# the files not named here, is kept.
LONGEST_FIRST = [
    # slow ones (CPU s alone, 2026-12-03): agent acceptance 711 — it alone is a quarter of the
    # slow suite, so it starts first —, the gates ~200 each, the C++ jinja renderer's build 192
    "serve/test_agent_acceptance.py",
    "gate/test_gate_well.py", "gate/test_gate_hurt.py", "gate/test_gate_noise.py",
    "export/test_gguf_chat_template.py",
    "train/test_multidevice.py", "train/test_train_cli.py",
    "train/test_train.py", "serve/test_serve.py", "train/test_user_data.py",
    "export/test_export.py", "studio/test_browser.py", "compare/test_compare.py",
    "plan/test_planner.py", "eval/test_run.py", "serve/test_serve_fuzz.py",
    "calibrate/test_calibrate.py", "train/test_paths.py", "export/test_hf_rung.py",
    "synth/teacher/test_serve_teacher.py", "gate/test_gate.py", "afk/test_afk.py",
]


def pytest_collection_modifyitems(config, items):
    root = Path(__file__).parent
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def key(item):
        try:
            rel = Path(str(item.fspath)).relative_to(root).as_posix()
        except ValueError:
            rel = ""
        return rank.get(rel, len(rank))
    items.sort(key=key)   # stable: the rest keeps its order
