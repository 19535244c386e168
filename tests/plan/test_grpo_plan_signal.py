"""The plan's warning before a grpo run whose warm start makes "no signal" likely
(mens.plan.signal): the expected frac_reward_zero_std p^G + (1 − p)^G, checked against the loop's
own statistic on sampled rewards, and the warm start's pass rate read from a run dir as mens
writes it (summary.json's held_out_oracle, eval.json's pass@1 rows)."""
from __future__ import annotations

import json

import pytest

from mens.plan.signal import ZERO_STD_WARN, signal, smallest_group, zero_std_share


def test_expected_share_is_the_loops_frac_reward_zero_std():
    """Sampled pass/fail rewards at rate p, grouped by G and normalised by the loop's own
    group_advantages: the share of groups whose advantages are all 0 (the loop's
    frac_reward_zero_std) matches p^G + (1 − p)^G within 3 standard errors."""
    torch = pytest.importorskip("torch")
    from mens.objective.grpo import group_advantages

    gen = torch.Generator().manual_seed(0)
    for p, G in ((0.05, 4), (0.3, 8), (0.9, 16)):
        groups = 20000
        rewards = (torch.rand(groups * G, generator=gen) < p).float()
        adv = group_advantages(rewards, G).view(groups, G)
        measured = float((adv.abs().sum(1) == 0).float().mean())
        want = zero_std_share(p, G)
        se = (want * (1 - want) / groups) ** 0.5
        assert abs(measured - want) < 3 * se + 1e-9, (p, G, measured, want)


def test_smallest_group_that_clears_the_threshold():
    assert zero_std_share(0.05, 4) > ZERO_STD_WARN
    g = smallest_group(0.05, 4)
    assert zero_std_share(0.05, g) <= ZERO_STD_WARN < zero_std_share(0.05, g - 1)
    assert smallest_group(0.0, 4) is None            # nothing ever passes: no G helps


def warm_run(tmp_path, summary=None, eval_rows=None, spoke="vox_lang"):
    run = tmp_path / "warm"
    (run / "adapter").mkdir(parents=True)
    if summary is not None:
        (run / "summary.json").write_text(json.dumps(summary))
    if eval_rows is not None:
        from eval_util import metric_row, write_eval
        write_eval(run, [metric_row(f"{spoke}/pass@1", "in_domain", b, t, spoke=spoke)
                         for b, t in eval_rows], spoke=spoke)
    return run / "adapter"


def oracle_summary(pass_rate, spoke="vox_lang", n=40):
    return {"held_out_oracle": {"spoke": spoke, "check": "vox_parses", "before": {},
                                "after": {"n": n, "passed": round(pass_rate * n),
                                          "pass_rate": pass_rate, "reward_mean": 0.3}}}


def test_a_cold_warm_start_is_warned_with_its_number_and_ways_out(tmp_path, compile_run):
    adapter = warm_run(tmp_path, summary=oracle_summary(0.05))
    spec, plan = compile_run("lane=grpo", "lane.grpo.reward=pass", f"train.init_adapter={adapter}")
    s = plan.signal
    assert s["warn"] and s["pass_rate"] == 0.05
    assert s["expected_frac_reward_zero_std"] == pytest.approx(0.95 ** 4 + 0.05 ** 4, abs=1e-4)
    assert "summary.json" in s["source"] and "81%" in s["line"]
    assert "lane.grpo.num_generations=5" in s["line"]           # smallest_group(0.05, 4)
    assert "lane.grpo.reward=partial" in s["line"] and "warmer start" in s["line"]
    assert "hacking" not in s["line"]                          # pass/fail: nothing to game
    # partial credit or a format reward: the same start, hacking named
    partial = signal(4, "partial", 0.0, str(adapter), "vox_lang")
    assert partial["warn"] and "reward hacking" in partial["line"]
    assert "reward hacking" in signal(4, "pass", 0.5, str(adapter), "vox_lang")["line"]


def test_eval_pass_at_1_is_preferred_and_a_middle_rate_only_noted(tmp_path):
    # eval.json's sampled pass@1 of the tuned model: 10 of 20 prompts → p = 0.5
    adapter = warm_run(tmp_path, summary=oracle_summary(0.05),
                       eval_rows=[([0] * 20, [1] * 10 + [0] * 10)])
    s = signal(8, "pass", 0.0, str(adapter), "vox_lang")
    assert s["pass_rate"] == 0.5 and "eval.json" in s["source"]
    assert not s["warn"] and s["expected_frac_reward_zero_std"] == pytest.approx(2 * 0.5 ** 8, abs=1e-4)
    # a warm start that nearly always passes warns too, toward a cooler start
    hot = signal(4, "pass", 0.0, str(warm_run(tmp_path / "hot", summary=oracle_summary(0.975))),
                 "vox_lang")
    assert hot["warn"] and "cooler start" in hot["line"]


def test_unknown_pass_rate_is_a_note_not_a_warning(tmp_path):
    base = signal(4, "partial", 0.0, None, "vox_lang")
    assert base["pass_rate"] is None and not base["warn"] and "unknown" in base["line"]
    other = signal(4, "pass", 0.0, str(warm_run(tmp_path, summary=oracle_summary(
        0.05, spoke="rust_workspace"))), "vox_lang")
    assert other["pass_rate"] is None and "rust_workspace" in other["line"]
    bare = tmp_path / "bare"
    bare.mkdir()
    assert "not in a mens run dir" in signal(4, "pass", 0.0, str(bare), "vox_lang")["line"]


def test_the_printed_plan_and_plan_json_carry_it(tmp_path, mens_cli):
    """One `mens plan` of grpo as a user runs it: the warning, the sampling memory's terms and
    the oracle's bound, printed and in plan.json (all of this issue's plan lines, one process)."""
    adapter = warm_run(tmp_path, summary=oracle_summary(0.05))
    r = mens_cli("mens.plan", "+hw=h100", "+rung=0.6b", "lane=grpo", "lane.grpo.reward=pass",
                 "lane.grpo.oracle_timeout_s=5", f"train.init_adapter={adapter}",
                 f"hydra.run.dir={tmp_path}/p")
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert "WARNING: grpo: the warm start passes 5.0%" in out
    plan = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert plan["signal"]["warn"] and plan["signal"]["pass_rate"] == 0.05
    # the sampling memory, term by term (mens.plan.rl), each component in the table too
    s = plan["sampling"]
    assert set(s["generation_bytes"]) == {"kv_cache", "kv_growth", "prefill", "sampling_logits"}
    assert f"KV cache {s['generation_bytes']['kv_cache'] / 2**30:.3f}" in out
    assert "× 28 layers × K,V × 8 kv heads × 128 × 2 B" in out
    assert "log-prob pass: logits" in out and "reference_logits" in plan["components"]
    # the init adapter's reference is a frozen copy of the policy it starts from
    assert "a frozen copy of the model" in s["reference"] and plan["components"]["reference_copy"] > 0
    # the oracle's bound in the ETA
    assert "if every answer ran to its timeout" in out
    assert "grpo.oracle_timeout_s=5 s per optimizer step's window" in out and "the ETA's upper end" in out
