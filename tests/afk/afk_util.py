"""Helpers for tests/afk: `mens afk` as a user runs it, in its own process group (so a test can
SIGKILL the queue together with its training child), and readers of what it leaves."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from train_util import FAST_TRAIN
from mens.run.rundir import RunDir
from mens.run.telemetry import read

# a tiny cell that trains in a few seconds and checkpoints every step (so a kill always
# finds a checkpoint once one CHECKPOINT row is written)
CELL_OVERRIDES = [*[o for o in FAST_TRAIN if not o.startswith("train.eval_max_records")],
                  "train.eval_max_records=2", "train.checkpoint_every=1"]


def overrides_arg(steps: int) -> str:
    quoted = ",".join(f"'{o}'" for o in [*CELL_OVERRIDES, f"train.max_steps={steps}"])
    return f"afk.overrides=[{quoted}]"


def afk_args(afk_dir: Path, cells: list[str], steps: int, *more: str) -> list[str]:
    return [f"afk.dir={afk_dir}", f"afk.cells=[{','.join(cells)}]", overrides_arg(steps),
            "afk.gate=false", "afk.poll_s=0.2", *more]


def env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}


def start(*args: str, cwd: Path) -> subprocess.Popen:
    """`python -m mens.afk args` in a new session: its own process group, as a shell job."""
    return subprocess.Popen([sys.executable, "-m", "mens.afk", *args], cwd=cwd, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def run(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mens.afk", *args], cwd=cwd, env=env(),
                          capture_output=True, text=True, timeout=timeout)


def queue(afk_dir: Path) -> dict:
    return json.loads((afk_dir / "queue.json").read_text())


def items(afk_dir: Path) -> dict[str, dict]:
    return {i["cell"]: i for i in queue(afk_dir)["items"]}


def rows(run_dir: Path | str, event: str | None = None) -> list[dict]:
    # not strict: these runs are SIGKILLed on purpose, and a resume appends after a half row
    return read(RunDir(run_dir).telemetry, event, strict=False)


def wait_for(pred, proc: subprocess.Popen, what: str, timeout: float = 300) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"mens afk exited {proc.returncode} before {what}:\n{out}\n{err}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def checkpointed(afk_dir: Path, cell: str, step: int = 2):
    """A predicate: the cell's training has written a CHECKPOINT row at >= step."""
    def pred() -> bool:
        try:
            run_dir = items(afk_dir)[cell]["run_dir"]
        except (OSError, ValueError, KeyError):
            return False
        return any(r["step"] >= step for r in rows(run_dir, "CHECKPOINT"))
    return pred


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the queue and its training child at once (the process group)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)


def train_steps(run_dir: Path | str) -> list[int]:
    return [r["step"] for r in rows(run_dir, "TRAIN_STEP")]
