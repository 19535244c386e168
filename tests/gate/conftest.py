"""Gated tiny runs shared by the gate and promotion tests (each trained and gated once).

Fast tests gate the shared 10-step run on its held-out loss with a few prompts and the floor
lowered to match (FAST_GATE). The
slow acceptance tests use the gate's defaults — every held-out prompt up to 64, k = 4, gate.metric
auto, min_gain, max_regression, every other spoke guarded — on adapters trained for the purpose,
with one exception for CPU time: answers of 64 tokens, not 256 (DEFAULT_GATE). The tiny rung
never writes valid Vox (pass@1 measured 0/200 for base and tuned at 256 tokens), so auto gates
its held-out loss at any answer length; the verdicts stand on the loss and the guards."""
from __future__ import annotations


import pytest

from train_util import FAST_TRAIN, run_copy

# CPU time: 6 prompts per spoke, below the default floor of 20 items (eval.min_items), which is
# lowered to 6 here — the fewest on which the exact sign-flip test can call a gain significant
# at 95 % (p = 1/64 when all six improve; 5 items give p >= 1/32). The receipt records it.
FAST_GATE = ["logger=csv", "gate.metric=loss", "gate.max_prompts=6", "gate.k=1",
             "gate.max_new_tokens=16", "eval.min_items=6"]
DEFAULT_GATE = ["logger=csv", "gate.max_new_tokens=64"]
# the well-trained vox_lang adapter of the acceptance: one epoch (34 steps) at lr 1e-3 — measured
# vox_lang loss −4.9 % [−5.9, −4.1], every other spoke within 2.6 % (at the rung's 3e-3 two
# spokes lose 6–7 % with confidence and the gate refuses it)
WELL_TRAINED = ["+hw=cpu", "logger=csv", "train.seq_len=256", "train.global_batch=8",
                "train.micro_batch=8", "curriculum=flat", "train.eval_max_records=6",
                "lane.optimizer.lr=1e-3"]


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
    """One epoch of vox_lang at lr 1e-3, under the default gate: it passes."""
    run = trained(tmp_path_factory.mktemp("gate") / "well", *WELL_TRAINED)
    return run, gate(run, *DEFAULT_GATE)


@pytest.fixture(scope="session")
def hurt_run(tmp_path_factory):
    """A tiny adapter trained at lr 3e-2 (10× the rung's rate): every other spoke's held-out
    loss rises by tens of percent. Under the default gate's rules: it fails — on 16 prompts per
    spoke, not 64, and the floor lowered to match (CPU time: a loss that rises by tens of
    percent is confident on 16, by the exact test that decides below 20 items)."""
    run = trained(tmp_path_factory.mktemp("gate") / "hurt", *FAST_TRAIN, "train.max_steps=10",
                  "lane.optimizer.lr=3e-2")
    return run, gate(run, *DEFAULT_GATE, "gate.max_prompts=16", "eval.min_items=16")


@pytest.fixture(scope="session")
def two_step_run(tmp_path_factory):
    """Two optimizer steps at lr 1e-4: the loss moves by ~0.1 % (measured +0.1 % [+0.1, +0.1]:
    consistent, and far below gate.min_gain). Under the default gate's in-domain rule: fails,
    not significant (the guards of other spokes are left out: they cannot change that verdict,
    and they are the gate's costliest part on CPU — the two tests above run them)."""
    run = trained(tmp_path_factory.mktemp("gate") / "two", *WELL_TRAINED, "train.max_steps=2",
                  "lane.optimizer.lr=1e-4")
    return run, gate(run, *DEFAULT_GATE, "gate.collateral=false")
