"""Issue #13's training paths end to end: per-record attention, the chunked loss and the fixed
heap (train.attention=per_record train.loss=chunked train.heap=fixed) train the same model as
the calibrated paths (4-D mask, full logits, glibc's heap) — the same losses step by step — and
the plan says it used their analytic terms, uncalibrated."""
from __future__ import annotations

import pytest
from conftest import FAST_TRAIN

LEAN = ["train.attention=per_record", "train.loss=chunked", "train.heap=fixed"]


def _losses(run):
    from mens.train.telemetry import read
    return [r["loss"] for r in read(run / "telemetry.jsonl") if r["event"] == "TRAIN_STEP"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    from mens.config.compose import compose
    from mens.plan.output import plan_run
    from mens.train.run import train_run

    out = {}
    for name, extra in (("calibrated", []), ("lean", LEAN)):
        run = tmp_path_factory.mktemp(name)
        spec, plan = plan_run(compose([*FAST_TRAIN, "train.max_steps=4", *extra]), run, "train")
        out[name] = (spec, plan, train_run(spec, plan, run), run)
    return out


def test_lean_paths_train_the_same_losses(two_runs):
    a, b = _losses(two_runs["calibrated"][3]), _losses(two_runs["lean"][3])
    assert len(a) == len(b) == 4
    assert b == pytest.approx(a, rel=2e-4)
    sa, sb = two_runs["calibrated"][2], two_runs["lean"][2]
    assert sb["eval_loss_adapter"] == pytest.approx(sa["eval_loss_adapter"], rel=1e-4)


def test_the_plan_says_which_paths_and_that_they_are_uncalibrated(two_runs):
    from mens.train.telemetry import read

    spec, plan, _, run = two_runs["lean"]
    assert (spec.train.attention, spec.train.loss, spec.train.heap) == ("per_record", "chunked",
                                                                        "fixed")
    assert sum("under the uncalibrated margin" in n for n in spec.notes) == 3
    assert not plan.calibrated and plan.components["packing_mask"] == 0
    calibrated = two_runs["calibrated"][1]
    assert plan.components["logits"] < calibrated.components["logits"]
    first = read(run / "telemetry.jsonl")[0]
    assert first["allocator"]["allocator"] in ("glibc", "default")
    (used,) = [r for r in read(run / "telemetry.jsonl") if r["event"] == "PATHS"]
    assert (used["attention"], used["loss"]) == ("per_record", "chunked")
    (used,) = [r for r in read(two_runs["calibrated"][3] / "telemetry.jsonl")
               if r["event"] == "PATHS"]
    assert (used["attention"], used["loss"]) == ("block_mask", "full_logits")
    cspec = two_runs["calibrated"][0]
    assert (cspec.train.attention, cspec.train.loss, cspec.train.heap) == ("block_mask",
                                                                           "full_logits", "default")


def test_a_family_the_per_record_path_cannot_express_falls_back_at_plan_time(compile_run):
    spec, plan = compile_run("+hw=cpu", "train.attention=per_record", "rung.family=gemma2")
    assert spec.train.attention == "block_mask"
    assert any(n.startswith("FALLBACK attention: Gemma 2") for n in spec.notes)
