"""Gated tiny runs shared by the gate and promotion tests (each trained and gated once).

Fast tests gate the shared 10-step run on its held-out loss with a few prompts (FAST_GATE); the
slow acceptance tests use the gate's defaults (every held-out prompt up to 64, k = 4, 256 tokens,
pass@1 by the oracle, every other spoke guarded) on adapters trained for the purpose."""
from __future__ import annotations

import shutil

import pytest

from conftest import FAST_TRAIN

FAST_GATE = ["logger=csv", "gate.metric=loss", "gate.max_prompts=4", "gate.k=1",
             "gate.max_new_tokens=16"]
# the well-trained vox_lang adapter of the acceptance: one epoch (34 steps) at the rung's rate
WELL_TRAINED = ["+hw=cpu", "logger=csv", "train.seq_len=256", "train.global_batch=8",
                "train.micro_batch=8", "curriculum=flat", "train.eval_max_records=6"]


def run_copy(run, dest):
    dest.mkdir(parents=True)
    for name in ("spec.yaml", "summary.json", "plan.json", "telemetry.jsonl"):
        shutil.copy2(run / name, dest / name)
    shutil.copytree(run / "adapter", dest / "adapter")
    return dest


def gate(run, *overrides):
    from mens.config.compose import compose
    from mens.gate.run import gate_run

    return gate_run(run, compose([f"run={run}", *overrides]))


def trained(dest, *overrides):
    from mens.config.compose import compose
    from mens.plan.output import plan_run
    from mens.train.run import train_run

    spec, plan = plan_run(compose(list(overrides)), dest, "train")
    train_run(spec, plan, dest)
    return dest


@pytest.fixture(scope="session")
def good_run(tiny_run, tmp_path_factory):
    """A copy of the shared tiny run, gated on its loss (FAST_GATE): it passes."""
    run = run_copy(tiny_run, tmp_path_factory.mktemp("gate") / "good")
    return run, gate(run, *FAST_GATE)


@pytest.fixture(scope="session")
def well_trained(tmp_path_factory):
    """One epoch of vox_lang at the tiny rung's rate, under the default gate: it passes."""
    run = trained(tmp_path_factory.mktemp("gate") / "well", *WELL_TRAINED)
    return run, gate(run, "logger=csv")


@pytest.fixture(scope="session")
def hurt_run(tmp_path_factory):
    """A tiny adapter trained at lr 3e-2 (10× the rung's rate): every other spoke's held-out
    loss rises by tens of percent. Under the default gate: it fails."""
    run = trained(tmp_path_factory.mktemp("gate") / "hurt", *FAST_TRAIN, "train.max_steps=10",
                  "lane.optimizer.lr=3e-2")
    return run, gate(run, "logger=csv")


@pytest.fixture(scope="session")
def two_step_run(tmp_path_factory):
    """Two optimizer steps: whatever moved is within noise. Under the default gate: fails."""
    run = trained(tmp_path_factory.mktemp("gate") / "two", *WELL_TRAINED, "train.max_steps=2")
    return run, gate(run, "logger=csv")
