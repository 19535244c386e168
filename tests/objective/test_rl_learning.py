"""Issue #39's learning acceptance, on the tiny rung through the real `python -m mens` (Hydra,
the planner, a real Lightning Trainer, GRPO sampling in the step, the oracle in its sandboxed
children): does the loop learn a reward that is there, and only that one?

Data: mens.synth.arith (level 1, single-digit sums), train on eight phrasings, held out on eight
others. Each test starts GRPO from an SFT warm start (train.init_adapter), trained here first.

- bandit: reward 1 iff the answer starts with `<answer>` (spoke.admission.check=answer_first);
  the warm start answers that way about 20 % of the time (a mix of 20 % direct answers, measured
  as the sampled reward of GRPO's first steps) → the greedy held-out reward reaches ≥ 0.9 within
  40 steps (20 are run), on each of three sampling seeds (one shared warm start).
  Measured 2026-12-03 (2 cores shared with other jobs, load 6-9): p 0.23 / 0.16 / 0.25, greedy
  held-out 0.19 → 1.00 on each seed; the warm start 213 s, each GRPO run 185-271 s. With the
  issue's loop (rl-loop) merged, lighter load: p 0.19 / 0.25 / 0.25, 0.19 → 1.00 each, 212 s in all.

- length-only control: lane.grpo.reward=length rises while the exact-match pass rate does not,
  and the summary's grpo_flags call it reward hacking (the flag is rl-loop's, issue #39).

The arithmetic acceptance (exact match +15 points and its shuffled control) is in
tests/objective/test_rl_arith.py.
"""
from __future__ import annotations

import pytest
from rl_util import mens, steps, write

# slow, and a learning run: `make test-learn` (outside CI's 30-minute slow suite)
pytestmark = [pytest.mark.slow, pytest.mark.learning]

SFT = ["train.global_batch=16", "train.micro_batch=16", "lane.optimizer.lr=6e-3"]


# ------------------------------------------------------------------ bandit sanity
BANDIT_G, BANDIT_STEPS = 8, 20    # the issue asks for ≥ 0.9 within 40 steps: 20 are run


@pytest.fixture(scope="module")
def bandit_start(tmp_path_factory):
    """The warm start: one SFT epoch on 400 items, 20 % answered `<answer>N</answer>` at once,
    80 % worked (`a + b = N` first)."""
    root = tmp_path_factory.mktemp("bandit")
    data = write(root / "data", level=1, n_train=400, n_eval=100, direct=0.2, seed=0)
    mens(root / "sft", data, *SFT)
    return data, root / "sft" / "adapter"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bandit_reward_is_learned(bandit_start, tmp_path, seed):
    data, adapter = bandit_start
    s = mens(tmp_path, data, "lane=grpo", "spoke.admission.check=answer_first",
             "lane.grpo.reward=pass", "train.global_batch=4", "train.micro_batch=4",
             f"train.max_steps={BANDIT_STEPS}", "lane.optimizer.lr=1e-3", "lane.grpo.beta=0",
             f"lane.grpo.num_generations={BANDIT_G}", "lane.grpo.max_completion_length=8",
             "train.eval_max_records=100", f"train.init_adapter={adapter}", f"train.seed={seed}")
    rows = steps(tmp_path)
    assert len(rows) == BANDIT_STEPS
    # the warm start's p: the sampled reward of the first two steps (2 × 4 prompts × 8 answers)
    p0 = sum(r["rewards/pass/mean"] for r in rows[:2]) / 2
    held = s["held_out_oracle"]
    print(f"bandit seed {seed}: warm start p={p0:.3f}, greedy held-out "
          f"{held['before']['pass_rate']:.2f} -> {held['after']['pass_rate']:.2f}, rewards "
          f"{[round(r['rewards/pass/mean'], 2) for r in rows]}")
    assert 0.05 <= p0 <= 0.4, p0
    assert held["check"] == "answer_first" and held["after"]["n"] == 100
    assert held["before"]["pass_rate"] < 0.5 <= 0.9 <= held["after"]["pass_rate"]


def test_length_only_reward_is_flagged_as_hacking(bandit_start, tmp_path):
    """A reward for length alone (lane.grpo.reward=length, a control) rises while the exact-match
    oracle's held-out pass rate does not: the summary's grpo_flags name it reward hacking
    (mens.objective.grpo_window.flags). From the bandit's warm start (answers of 18-30
    characters); measured 2026-12-03 with the issue's loop merged: reward 0.54 → 1.00 over 24
    steps (flags' rise 0.23), held-out exact match 0.08 → 0.00 (60 items), flagged."""
    data, adapter = bandit_start
    s = mens(tmp_path, data, "lane=grpo", "lane.grpo.reward=length", "train.global_batch=4",
             "train.micro_batch=4", "train.max_steps=24", "lane.optimizer.lr=2e-3",
             "lane.grpo.beta=0", f"lane.grpo.num_generations={BANDIT_G}",
             "lane.grpo.max_completion_length=32", "train.eval_max_records=60",
             f"train.init_adapter={adapter}")
    rewards = [r["reward"] for r in steps(tmp_path)]
    held = s["held_out_oracle"]
    print(f"length-only: rewards {[round(r, 2) for r in rewards]}, held-out exact match "
          f"{held['before']['pass_rate']:.2f} -> {held['after']['pass_rate']:.2f}, "
          f"flags {s.get('grpo_flags')}")
    assert held["check"] == "arith_answer"                 # the task's oracle, only logged
    assert sum(rewards[-4:]) / 4 - sum(rewards[:4]) / 4 > 0.1
    assert held["after"]["pass_rate"] <= held["before"]["pass_rate"] + 0.05
    assert s["grpo_flags"]["reward_rose_oracle_pass_did_not"] is True
