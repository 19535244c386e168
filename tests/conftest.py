"""Shared fixtures: compose real configs with Hydra's compose API; run mens commands for real."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def compose():
    from mens.compose import compose as _compose
    return _compose


@pytest.fixture
def compile_run(compose):
    from mens.spec import compile_run as _compile

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
