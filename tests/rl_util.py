"""Shared by issue #39's learning runs (tests/objective/test_rl_learning.py, test_rl_arith.py):
one real `python -m mens` run on the arithmetic spoke's data, its summary and its step rows."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from mens.run.telemetry import read
from mens.synth import arith

BASE = ["+hw=cpu", "logger=csv", "spoke=arith", "data=file", "data.collateral=none",
        "curriculum=flat", "train.seq_len=128"]


def mens(out, data, *args) -> dict:
    """One real run (`python -m mens`) into `out`; its summary."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "mens", *BASE, f"data.path={data}/train.jsonl",
                        f"data.eval_path={data}/eval.jsonl", *args, f"hydra.run.dir={out}"],
                       env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


def steps(out) -> list[dict]:
    return [r for r in read(out / "telemetry.jsonl") if r["event"] == "TRAIN_STEP"]


def write(folder, **kw):
    train, evals = arith.split(**kw)
    folder.mkdir(parents=True, exist_ok=True)
    arith.write_jsonl(folder / "train.jsonl", train)
    arith.write_jsonl(folder / "eval.jsonl", evals)
    return folder
