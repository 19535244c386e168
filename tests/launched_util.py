"""What the launched-world tests share (tests/train/test_torchrun.py, tests/launch/test_ray.py):
the tiny run both compare, an environment free of any launcher's variables with gloo on loopback,
and the comparison itself (per-step losses and the adapter, to 1e-6)."""
from __future__ import annotations

import os
from pathlib import Path

from mens.run.telemetry import read

STEPS = 8
COMMON = ["+hw=cpu", "logger=csv", "train.seq_len=256", "curriculum=flat",
          "train.eval_max_records=6", "train.global_batch=2", "train.micro_batch=1",
          f"train.max_steps={STEPS}", "train.checkpoint_every=1", "lane=lora",
          "train.attention=per_record", "train.loss=chunked"]
ONE = ["train.grad_accum=2"]   # one process, micro-batch 1 × 2: the rows of one step on 2 ranks
TIMEOUT = 600
LAUNCHER_VARS = ("SLURM_", "TORCHELASTIC_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                 "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK",
                 "HYDRA_FULL_ERROR", "RAY_ADDRESS")


def clean_env(**extra) -> dict:
    """This test's environment without any launcher's variables (a test may itself run under
    one), gloo on loopback only (the machine's other address must see no traffic)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARS)}
    return {**env, "GLOO_SOCKET_IFNAME": "lo",
            "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"), **extra}


def steps(run: Path) -> dict[int, float]:
    """step → loss (a resumed run logs the steps after its checkpoint again: the last wins)."""
    return {r["step"]: r["loss"] for r in read(run / "telemetry.jsonl")
            if r["event"] == "TRAIN_STEP"}


def adapter_gap(a: Path, b: Path) -> float:
    from safetensors.torch import load_file

    x, y = (load_file(r / "adapter" / "adapter_model.safetensors") for r in (a, b))
    assert set(x) == set(y)
    return max(float((x[k] - y[k]).abs().max()) for k in x)


def assert_same_losses(run: Path, reference: Path) -> None:
    a, b = steps(run), steps(reference)
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1))
    for k in b:
        assert abs(a[k] - b[k]) <= 1e-6, (k, a[k], b[k])
