"""GRPO trains on every method (issue #28): 2 steps each on lora, qlora and full on the tiny rung
with a real Lightning Trainer (mens.train.run.train_run), sampling in the step, rewarded by the
spoke's own oracle (structured_shell: `bash -n` in the sandbox's child processes), and the
greedy oracle pass rate of held-out prompts measured before and after training.

At the first step the policy is the reference (an adapter starts at zero and is switched off
for the reference; full keeps a frozen copy of the initial weights): the logged KL is 0. A
reference from other weights would not give 0."""
from __future__ import annotations

import json

import pytest

from train_util import FAST_TRAIN
from mens.run.telemetry import read

G, T = 2, 16
GRPO = [*FAST_TRAIN, "lane=grpo", "spoke=structured_shell", "train.max_steps=2",
        "train.eval_max_records=2", "train.global_batch=2", "train.micro_batch=2",
        f"lane.grpo.num_generations={G}", f"lane.grpo.max_completion_length={T}"]
SEQ = {"lora": 256, "qlora": 128, "full": 256}   # qlora: its CPU kernels are slow
# each of TRL's loss_type names mens documents trains somewhere here (dapo: the default)
LOSS = {"lora": "dr_grpo", "qlora": "dapo", "full": "dapo"}


def test_every_documented_loss_type_is_accepted_and_no_other(compose):
    """Issue #37: dr_grpo was documented (README, mens.objective.grpo) but refused by
    validation. The one list (schema.GRPO_LOSSES) is what validation and the loss both read."""
    from mens.config.schema import GRPO_LOSSES
    from mens.errors import ConfigError
    from mens.objective.grpo import LOSS_TYPES

    assert set(GRPO_LOSSES) == set(LOSS_TYPES) == {"dapo", "grpo", "bnpo", "dr_grpo"}
    for loss in GRPO_LOSSES:
        assert compose(["lane=grpo", f"lane.grpo.loss_type={loss}"]).lane.grpo.loss_type == loss
    with pytest.raises(ConfigError) as e:
        compose(["lane=grpo", "lane.grpo.loss_type=dr-grpo"])
    assert e.value.key == "lane.grpo.loss_type" and "dr_grpo" in e.value.message


@pytest.mark.parametrize("method", list(SEQ))
def test_grpo_trains_on_each_method(compile_run, tmp_path, capsys, method):
    from mens.train.run import train_run

    spec, plan = compile_run(*GRPO, f"lane.method={method}", f"train.seq_len={SEQ[method]}",
                             f"lane.grpo.loss_type={LOSS[method]}", purpose="train")
    assert spec.lane.grpo.loss_type == LOSS[method]
    assert not plan.shape.packing and plan.cell.split("/")[1] == f"{method}-grpo"
    summary = train_run(spec, plan, tmp_path)
    assert summary["steps"] == 2
    assert (summary["lane"], summary["method"], summary["objective"]) == \
        (f"{method}-grpo", method, "grpo")
    assert (tmp_path / ("model" if method == "full" else "adapter")).is_dir()
    steps = [r for r in read(tmp_path / "telemetry.jsonl") if r["event"] == "TRAIN_STEP"]
    assert len(steps) == 2
    first = steps[0]
    assert abs(first["kl"]) < 1e-6                                  # policy = reference
    assert 0 <= first["reward"] <= 1 and first["oracle/answers"] == 2 * G
    assert first["oracle/timeouts"] == 0 and first["oracle/crashes"] == 0
    assert 1 <= first["completions/mean_length"] <= T
    assert first["rows/length"] <= SEQ[method]                      # prompt cut to seq_len − T
    # issue #39: the health numbers under TRL's names, in every TRAIN_STEP row
    for k in ("reward", "reward_std", "frac_reward_zero_std", "kl", "entropy",
              "rewards/partial/mean", "rewards/partial/std", "rewards/pass/mean",
              "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
              "completions/mean_length", "completions/min_length", "completions/max_length",
              "completions/clipped_ratio", "prompts/repeated"):
        assert all(k in r for r in steps), k
    assert first["entropy"] > 0 and 0 <= first["frac_reward_zero_std"] <= 1
    assert first["completions/min_length"] <= first["completions/mean_length"] <= \
        first["completions/max_length"] <= T
    assert set(summary["grpo_flags"]) >= {"reward_rose_oracle_pass_did_not",
                                          "most_groups_have_one_reward", "rule"}
    # before → after: the greedy answers to the held-out prompts, scored by the same oracle
    held = summary["held_out_oracle"]
    assert held["check"] == "shell_syntax" and held["before"]["n"] == held["after"]["n"] == 2
    assert held["after"]["passed"] + held["after"]["failed"] + held["after"]["unverified"] == 2
    evals = [r for r in read(tmp_path / "telemetry.jsonl")
             if r["event"] == "EVAL" and r["split"] == "oracle"]
    assert [r["model"] for r in evals] == ["base", "adapter"]
    kept = json.loads((tmp_path / "held_out_oracle.json").read_text())
    assert len(kept["after"]["answers"]) == 2 and len(kept["before"]["rewards"]) == 2
    assert "greedy answers pass the oracle (shell_syntax)" in capsys.readouterr().err
    # the planner's prediction bounds what the training window used
    assert summary["measured_peak_bytes"] <= summary["predicted_peak_bytes"]
