"""On-policy distillation learns (issue #39): the tiny rung as the student, and as its teacher a
different tiny model — the tiny rung after a short LoRA SFT on vox_lang, merged into its
weights and saved as a Hugging Face model directory. 100 steps of `lane=distill` through
`python -m mens` (a real Lightning Trainer) must cut the student's held-out reverse KL to the
teacher, KL(student‖teacher) per answer token on its own sampled answers to the held-out
prompts (mens.objective.distill.Distill.held_out, in the summary and the EVAL rows), by at
least half. Slow: ~3 minutes on 2 cores."""
from __future__ import annotations

import json

import pytest

from train_util import FAST_TRAIN
from mens.run.telemetry import read

STEPS = 100
# 2 prompts a step, 2 passes over vox_lang's ~270 records (flat: one) so 100 steps are reached
DISTILL = ["lane=distill", "lane.distill.lmbda=1.0", "lane.distill.max_completion_length=24",
           f"train.max_steps={STEPS}", "train.eval_max_records=16", "data.collateral=none",
           "train.global_batch=2", "train.micro_batch=2", "curriculum.epochs=2",
           "curriculum.caps=[10,10]"]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """The tiny rung after 20 LoRA SFT steps at a high rate, merged: a different tiny model
    with the student's tokenizer."""
    from peft import PeftModel

    from mens.config.compose import compose
    from mens.model.load import load_base
    from mens.plan.output import plan_run
    from mens.train.run import train_run

    run = tmp_path_factory.mktemp("teacher_sft")
    cfg = compose([*FAST_TRAIN, "train.max_steps=20", "lane.optimizer.lr=1e-2",
                   "data.collateral=none"])
    spec, plan = plan_run(cfg, run, "train")
    train_run(spec, plan, run)
    merged = PeftModel.from_pretrained(load_base(spec.rung), str(run / "adapter"))
    merged = merged.merge_and_unload()
    out = tmp_path_factory.mktemp("teacher") / "model"
    merged.save_pretrained(out)
    return out


@pytest.mark.slow
@pytest.mark.learning   # make test-learn (outside CI's 30-minute slow suite)
def test_held_out_reverse_kl_to_the_teacher_halves_in_100_steps(teacher, mens_cli, tmp_path):
    r = mens_cli("mens", *FAST_TRAIN, *DISTILL, f"lane.distill.teacher={teacher}",
                 f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["objective"] == "distill"
    held = summary["held_out_distill"]
    before, after = held["before"]["reverse_kl"], held["after"]["reverse_kl"]
    print(f"held-out reverse KL {before:.4f} → {after:.4f} ({1 - after / before:.0%} lower); "
          f"forward KL {held['before']['forward_kl']:.4f} → {held['after']['forward_kl']:.4f}; "
          f"peak {summary['measured_peak_bytes'] / 2**20:.0f} MiB measured, "
          f"{summary['predicted_peak_bytes'] / 2**20:.0f} planned")
    assert before > 0.05                       # the teacher is another model
    assert after <= 0.5 * before
    rows = read(tmp_path / "run" / "telemetry.jsonl")
    evals = [e for e in rows if e["event"] == "EVAL" and e.get("split") == "distill"]
    assert [e["model"] for e in evals] == ["base", "adapter"]
    assert evals[0]["reverse_kl"] == before and evals[1]["reverse_kl"] == after
    steps = [e for e in rows if e["event"] == "TRAIN_STEP"]
    assert len(steps) == STEPS and all(e["on_policy"] == 1.0 for e in steps)   # lmbda 1
    # the plan counted the teacher (weights, logits, the JSD's tensors): it bounds the window
    assert summary["measured_peak_bytes"] <= summary["predicted_peak_bytes"]
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert json.dumps(plan).count('"teacher"') >= 1
