"""Issue #39's health of the GRPO loop, without a model: the held-out oracle measure counts an
answer the oracle cannot judge here as unverified (it crashed on int(nan) before step 1), and
the summary's flags (summary.json `grpo_flags`) follow their documented rule."""
from __future__ import annotations

import math

import pytest

from mens.objective.grpo import held_out_counts
from mens.objective.grpo_window import flags
from mens.objective.rewards import oracle_rewards

GOOD, BAD, NONE = "```bash\necho hi\n```", "```bash\nif then fi (\n```", "no code here"
ASK = [{"role": "user", "content": "print hi in bash"}]


def judge(texts):
    recs = [{"id": str(i), "messages": ASK} for i in range(len(texts))]
    return oracle_rewards("shell_syntax", recs, [ASK] * len(texts), texts, reward="partial")


def test_an_oracle_that_cannot_run_counts_unverified_never_pass_or_fail(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))          # no bash here: `bash -n` cannot run
    rew = judge([GOOD, BAD, NONE])
    assert math.isnan(rew.passed[0]) and math.isnan(rew.passed[1])    # the oracle's NaN
    got = held_out_counts(rew)
    assert (got["passed"], got["failed"], got["unverified"]) == (0, 1, 2)   # no block: a fail
    assert got["pass_rate"] == 0.0 and got["passes"] == [None, None, 0]
    none = held_out_counts(judge([GOOD, BAD]))
    assert none["unverified"] == 2 and none["pass_rate"] is None and none["reward_mean"] is None


def test_with_bash_the_same_answers_pass_and_fail():
    got = held_out_counts(judge([GOOD, BAD, NONE]))
    assert (got["passed"], got["failed"], got["unverified"]) == (1, 2, 0)
    assert got["pass_rate"] == pytest.approx(1 / 3) and got["passes"] == [1, 0, 0]


def steps(rewards, zero=0.2):
    return [{"event": "TRAIN_STEP", "step": i + 1, "reward": r, "frac_reward_zero_std": zero}
            for i, r in enumerate(rewards)]


RISING = [0.1, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]        # last quarter − first quarter = 0.55


def held(passes):
    p = [x for x in passes if x is not None]
    return {"n": len(passes), "passes": passes, "passed": sum(p), "failed": len(p) - sum(p),
            "pass_rate": sum(p) / len(p) if p else None}


def test_reward_rising_while_the_oracle_pass_does_not_is_flagged_as_hacking():
    before = held([0, 1, 0, 0, 1, 0, 0, 0, 1, 0])
    out = flags(steps(RISING), before, held([0, 1, 0, 0, 1, 0, 0, 0, 1, 0]))
    assert out["reward_rose_oracle_pass_did_not"] is True
    assert out["reward_rise"] == pytest.approx(0.55) and out["pass_gain"] == 0
    assert out["most_groups_have_one_reward"] is False


def test_reward_rising_with_the_oracle_pass_is_not_hacking():
    before = held([0] * 20)
    out = flags(steps(RISING), before, held([1] * 15 + [0] * 5))
    assert out["reward_rose_oracle_pass_did_not"] is False and out["pass_gain_ci95"][0] > 0


def test_a_flat_reward_is_not_hacking_and_equal_groups_are_no_signal():
    out = flags(steps([0.3] * 8, zero=0.9), held([0] * 10), held([0] * 10))
    assert out["reward_rose_oracle_pass_did_not"] is False
    assert out["most_groups_have_one_reward"] is True
    assert out["mean_frac_reward_zero_std"] == pytest.approx(0.9)


def test_too_little_to_judge_is_none_not_a_verdict():
    assert flags(steps([0.1, 0.9]), held([0]), held([0]))["reward_rose_oracle_pass_did_not"] \
        is None                                              # fewer than 4 steps
    unverified = held([None, None])
    assert flags(steps(RISING), unverified, unverified)["reward_rose_oracle_pass_did_not"] is None
    # a resumed run's base numbers come without items: the two rates are compared
    out = flags(steps(RISING), {"n": 10, "passed": 2, "failed": 8, "pass_rate": 0.2},
                held([1, 0, 0, 0, 1, 0, 0, 0, 0, 0]))
    assert out["reward_rose_oracle_pass_did_not"] is True
