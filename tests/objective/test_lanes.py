"""Every objective trains on every method (issue #28): sft and dpo, 2 steps each on lora, qlora
and full on the tiny rung, with a real Lightning Trainer (mens.train.run.train_run).

DPO's reference is the initial policy's log-probs, computed once before training and only for
the pairs the planned steps reach: at the first step the policy *is* the reference, so every
logged reward is 0 (on full as on the adapters — a reference from other weights would not be)."""
from __future__ import annotations

import csv
import re

import pytest

from train_util import FAST_TRAIN
from mens.run.telemetry import read

PAIRS = ["spoke=skill_creation"]
METHOD = {"lora": [], "qlora": ["train.seq_len=128"], "full": []}   # qlora: its CPU kernels are slow
FAST = [*FAST_TRAIN, "train.max_steps=2", "train.eval_max_records=2"]


def _train(compile_run, out, *overrides):
    from mens.train.run import train_run

    spec, plan = compile_run(*FAST, *overrides, purpose="train")
    return spec, plan, train_run(spec, plan, out)


@pytest.mark.parametrize("method", list(METHOD))
def test_sft_trains_on_each_method(compile_run, tmp_path, method):
    spec, plan, summary = _train(compile_run, tmp_path, f"lane={method}", *METHOD[method])
    assert summary["steps"] == 2
    assert (summary["lane"], summary["method"], summary["objective"]) == (method, method, "sft")
    assert plan.cell.split("/")[1] == method                     # SFT cells keep their names
    assert (tmp_path / ("model" if method == "full" else "adapter")).is_dir()


@pytest.mark.parametrize("method", list(METHOD))
def test_dpo_trains_on_each_method_against_the_initial_policy(compile_run, tmp_path, capsys,
                                                               method):
    spec, plan, summary = _train(compile_run, tmp_path, "lane=dpo", f"lane.method={method}",
                                 *PAIRS, *METHOD[method])
    assert summary["steps"] == 2
    assert (summary["lane"], summary["method"], summary["objective"]) == \
        (f"{method}-dpo", method, "dpo")
    assert plan.cell.split("/")[1] == f"{method}-dpo"
    assert (tmp_path / ("model" if method == "full" else "adapter")).is_dir()
    steps = [r for r in read(tmp_path / "telemetry.jsonl") if r["event"] == "TRAIN_STEP"]
    first = steps[0]
    # step 1 is logged from the weights the reference pass scored: no margin yet
    assert abs(first["rewards/margins"]) < 1e-4 and abs(first["rewards/chosen"]) < 1e-4
    assert "rewards/accuracies" in steps[-1]
    with open(tmp_path / "csv" / "metrics.csv") as f:            # the logger has them too
        assert {"train/rewards/margins", "train/loss"} <= set(next(csv.reader(f)))
    # the reference pass scored only the pairs 2 steps reach, not the whole corpus
    said = re.search(r"dpo reference pass: (\d+) of (\d+) pairs", capsys.readouterr().err)
    assert said, "the reference pass did not say what it scored"
    scored, total = map(int, said.groups())
    reach = 2 * spec.train.grad_accum * spec.train.micro_batch
    assert scored == min(reach, total) < total
    # the planner's prediction (its doubled rows) bounds what the training window used
    assert summary["measured_peak_bytes"] <= summary["predicted_peak_bytes"]
