"""GRPO's ETA counts the oracle: its typical time (the dev host's measurement, or the warm start's
own grpo steps read from its telemetry), and its bound — every answer run to
grpo.oracle_timeout_s — as the ETA's upper end, recomputed here from the plan's shape. (The
printed lines: test_grpo_plan_signal.py's one CLI run.)"""
from __future__ import annotations

import math

import pytest

from mens.config.objectives import ORACLE_WORKERS
from mens.plan.eta import eta

SHAPE = ("+hw=h100", "+rung=0.6b", "lane=grpo", "lane.grpo.num_generations=8",
         "lane.grpo.oracle_timeout_s=5")


def plan_eta(compose, *extra):
    from mens.plan.spec import compile_run
    cfg = compose([*SHAPE, *extra])
    spec, plan = compile_run(cfg)
    return spec, plan, eta(cfg, spec, plan)


def test_oracle_bound_is_every_answer_at_its_timeout(compose):
    """One oracle call per optimizer step judges its window's answers (micro_batch × grad_accum
    prompts × G: Grpo.open_window): the bound is the window's, a micro-step carrying
    1/grad_accum of it."""
    spec, plan, e = plan_eta(compose, "train.micro_batch=2", "train.grad_accum=4")
    o = e["oracle"]
    answers = 2 * 4 * 8
    assert o["answers_per_window"] == answers
    bound_s = math.ceil(answers / ORACLE_WORKERS) * 5.0
    assert o["bound_window_s"] == bound_s and o["bound_s"] == bound_s / 4
    windows = e["records"] / (2 * 4 * plan.world_size)
    assert o["bound_hours"] == pytest.approx(windows * bound_s / 3600, rel=1e-4)
    # the upper end swaps the typical oracle time for the bound, every other part alike
    typical = e["hours_by_part"]["oracle"]
    assert o["hours_upper"] == pytest.approx(e["hours"] - typical + o["bound_hours"], abs=1e-5)
    assert "measured" not in o                                  # no warm start: the dev host's


def test_the_warm_starts_measured_latency_replaces_the_dev_hosts(compose, tmp_path):
    from mens.run.telemetry import Event
    from mens.train.telemetry import Telemetry

    run = tmp_path / "warm"
    (run / "adapter").mkdir(parents=True)
    (run / "spec.yaml").write_text("spoke: {name: vox_lang, admission: {check: vox_parses}}\n")
    tel = Telemetry(run / "telemetry.jsonl")
    for step, (secs, answers) in enumerate([(0.9, 16), (1.1, 16), (1.0, 16)], start=1):
        tel.emit(Event.TRAIN_STEP, step=step, loss=0.1, **{"oracle/seconds": secs,
                                                           "oracle/answers": answers})
    tel.close()
    spec, plan, e = plan_eta(compose, f"train.init_adapter={run / 'adapter'}")
    o = e["oracle"]
    per_answer = 3.0 / 48
    # per micro-step: 1/grad_accum of the window's answers
    assert o["s"] == pytest.approx(per_answer * plan.shape.micro_batch * 8)
    assert o["s"] * plan.grad_accum == pytest.approx(per_answer * o["answers_per_window"])
    micro_steps = e["records"] / (plan.shape.micro_batch * plan.world_size)
    assert e["hours_by_part"]["oracle"] == pytest.approx(micro_steps * o["s"] / 3600, rel=1e-4)
    assert "62.5 ms per answer" in o["measured"]
    # another check's telemetry is not this oracle's latency
    (run / "spec.yaml").write_text("spoke: {admission: {check: rust_compiles}}\n")
    from mens.plan.eta import warm_start_latency
    assert warm_start_latency(str(run / "adapter"), "vox_parses") is None
