"""A real GRPO training run with lane.grpo.generation=server (issue #39): 3 optimizer steps on the
tiny rung with a real Lightning Trainer (mens.train.run.train_run); the run starts `mens serve`
itself (a subprocess on 127.0.0.1), samples every group through it, reloads its adapter after
each optimizer step, corrects the loss with the server's log-probs, and logs under TRL's names
and mens's rollout/* what that took. Slow: a server start and three steps on 2 cores."""
from __future__ import annotations

import math

import pytest

from train_util import FAST_TRAIN
from mens.run.telemetry import read

G, T = 2, 16


@pytest.mark.slow
def test_a_grpo_run_generates_through_the_server_it_starts(compile_run, tmp_path, capsys):
    from mens.train.run import train_run

    spec, plan = compile_run(*FAST_TRAIN, "lane=grpo", "spoke=structured_shell",
                             "train.max_steps=3", "train.eval_max_records=2",
                             "train.global_batch=2", "train.micro_batch=2",
                             # the tiny rung's answers mostly all fail `bash -n` (a group of
                             # equal rewards has no gradient): weight decay moves the adapter
                             # at every step all the same, so every step must reload it
                             "lane.optimizer.lr=1e-2", "lane.optimizer.weight_decay=0.1",
                             f"lane.grpo.num_generations={G}",
                             f"lane.grpo.max_completion_length={T}",
                             "lane.grpo.generation=server", purpose="train")
    summary = train_run(spec, plan, tmp_path)
    assert summary["steps"] == 3
    err = capsys.readouterr().err
    assert "rollouts through `mens serve` at http://127.0.0.1:" in err
    steps = [r for r in read(tmp_path / "telemetry.jsonl") if r["event"] == "TRAIN_STEP"]
    assert len(steps) == 3
    reloads = [r["rollout/reload_s"] for r in steps]
    ratios = [(r["sampling/importance_sampling_ratio/min"],
               r["sampling/importance_sampling_ratio/max"]) for r in steps]
    print(f"\nreload before each step's rollout: {reloads}\nimportance ratio per step: {ratios}"
          f"\nlogp difference max per step: "
          f"{[r['sampling/sampling_logp_difference/max'] for r in steps]}")
    assert math.isnan(reloads[0])                  # step 1 samples the initial policy
    assert all(t > 0 for t in reloads[1:])         # then one reload per optimizer step
    assert all(1 - 1e-3 <= lo <= hi <= 1 + 1e-3 for lo, hi in ratios)
    assert all(r["oracle/answers"] == 2 * G for r in steps)
