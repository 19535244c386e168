"""Helpers for the cloud tests: run `python -m mens.cloud …` / `python -m mens.recommend` for real."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture
def cloud_cli(tmp_path):
    """Run a mens module in a subprocess with HOME in tmp (no cloud credentials, no ~/.sky)."""
    def run(module: str, *args: str, home: Path | None = None):
        env = {**os.environ, "HOME": str(home or tmp_path / "home")}
        env.pop("HYDRA_FULL_ERROR", None)
        for var in ("GOOGLE_APPLICATION_CREDENTIALS", "AWS_ACCESS_KEY_ID"):
            env.pop(var, None)
        return subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                              text=True, cwd=tmp_path, env=env, timeout=300)
    return run
