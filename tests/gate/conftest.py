"""Gated tiny runs shared by the gate and promotion tests (each trained and gated once)."""
from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from conftest import FAST_TRAIN

# Tight enough that an adapter trained to hurt fails, loose enough that the shared tiny run
# (10 steps at lr 1e-3: vox_lang −8 %, other spokes within ±2.5 % here) passes.
THRESHOLDS = SimpleNamespace(max_prompts=2, max_new_tokens=8, min_improvement_pct=1.0,
                             max_collateral_pct=10.0, min_pass_delta=-1.0,
                             max_collateral_pass_drop=1.0)


def run_copy(run, dest):
    dest.mkdir(parents=True)
    for name in ("spec.yaml", "summary.json", "plan.json", "telemetry.jsonl"):
        shutil.copy2(run / name, dest / name)
    shutil.copytree(run / "adapter", dest / "adapter")
    return dest


@pytest.fixture(scope="session")
def good_run(tiny_run, tmp_path_factory):
    """A copy of the shared tiny run, gated: it passes."""
    from mens.gate.run import gate_run

    run = run_copy(tiny_run, tmp_path_factory.mktemp("gate") / "good")
    return run, gate_run(run, THRESHOLDS)


@pytest.fixture(scope="session")
def hurt_run(tmp_path_factory):
    """A tiny adapter trained at lr 3e-2 (10× the rung's rate): every other spoke's held-out
    loss rises by tens of percent. Gated: it fails."""
    from mens.config.compose import compose
    from mens.gate.run import gate_run
    from mens.plan.output import plan_run
    from mens.train.run import train_run

    run = tmp_path_factory.mktemp("gate") / "hurt"
    spec, plan = plan_run(compose([*FAST_TRAIN, "train.max_steps=10", "lane.optimizer.lr=3e-2"]),
                          run, "train")
    train_run(spec, plan, run)
    return run, gate_run(run, THRESHOLDS)
