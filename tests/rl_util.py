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


def student(spec):
    """(model, tokenizer, two chat records, encoder) of a distillation spec: its model with the
    LoRA B matrices moved off zero (so the student differs from a teacher that is its base)."""
    import torch

    from mens.data.examples import run_encoder
    from mens.model.load import load_model

    model, tok = load_model(spec)
    torch.manual_seed(0)
    for n, p in model.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0, 0.05)
    records = [{"id": f"r{i}", "messages": [{"role": "user", "content": q},
                                            {"role": "assistant", "content": a}]}
               for i, (q, a) in enumerate([("say hi", "hi there"), ("count", "1 2 3")])]
    return model, tok, records, run_encoder(tok, spec)
