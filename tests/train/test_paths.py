"""Issue #13's training paths end to end. The default (`auto`: what the memory contract's cells
were fitted on) is per-record attention, the chunked loss and the fixed heap; the classic paths
(train.attention=block_mask train.loss=full_logits train.heap=default) train the same model — the
same losses step by step — and the plan says it used their analytic terms, uncalibrated."""
from __future__ import annotations

import pytest
from train_util import FAST_TRAIN

CLASSIC = ["train.attention=block_mask", "train.loss=full_logits", "train.heap=default"]


def _losses(run):
    from mens.run.telemetry import read
    return [r["loss"] for r in read(run / "telemetry.jsonl") if r["event"] == "TRAIN_STEP"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    from mens.config.compose import compose
    from mens.plan.output import plan_run
    from mens.train.run import train_run

    out = {}
    for name, extra in (("lean", []), ("classic", CLASSIC)):
        run = tmp_path_factory.mktemp(name)
        spec, plan = plan_run(compose([*FAST_TRAIN, "train.max_steps=4", *extra]), run, "train")
        out[name] = (spec, plan, train_run(spec, plan, run), run)
    return out


def test_the_classic_paths_train_the_same_losses(two_runs):
    a, b = _losses(two_runs["lean"][3]), _losses(two_runs["classic"][3])
    assert len(a) == len(b) == 4
    assert b == pytest.approx(a, rel=2e-4)
    sa, sb = two_runs["lean"][2], two_runs["classic"][2]
    assert sb["eval_loss_adapter"] == pytest.approx(sa["eval_loss_adapter"], rel=1e-4)


def test_the_default_is_the_lean_paths_and_the_plan_says_when_it_is_not(two_runs):
    from mens.run.telemetry import read

    spec, plan, summary, run = two_runs["lean"]
    assert (spec.train.attention, spec.train.loss, spec.train.heap) == ("per_record", "chunked",
                                                                        "fixed")
    assert not any("under the uncalibrated margin" in n for n in spec.notes)
    assert plan.fitted and plan.components["packing_mask"] == 0
    (used,) = [r for r in read(run / "telemetry.jsonl") if r["event"] == "PATHS"]
    assert (used["attention"], used["loss"]) == ("per_record", "chunked")
    if used["heap"]["allocator"] == "glibc":   # every micro-batch starts from a trimmed heap
        assert used["heap"]["trim"] == "before every micro-batch"
        assert summary["heap_trims"] == 4 and summary["heap_trim_s"] >= 0
    cspec, cplan, csummary, crun = two_runs["classic"]
    assert (cspec.train.attention, cspec.train.loss, cspec.train.heap) == ("block_mask",
                                                                           "full_logits", "default")
    assert sum("under the uncalibrated margin" in n for n in cspec.notes) == 3
    assert not cplan.calibrated and cplan.components["logits"] > plan.components["logits"]
    (used,) = [r for r in read(crun / "telemetry.jsonl") if r["event"] == "PATHS"]
    assert (used["attention"], used["loss"], used["heap"]) == ("block_mask", "full_logits",
                                                               {"allocator": "default"})
    assert "heap_trims" not in csummary


def test_a_family_the_per_record_path_cannot_express_falls_back_at_plan_time(compile_run):
    spec, plan = compile_run("+hw=cpu", "rung.family=gemma2")
    assert spec.train.attention == "block_mask"
    assert any(n.startswith("FALLBACK attention: Gemma 2") for n in spec.notes)
