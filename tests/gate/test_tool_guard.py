"""The gate's tool-call guard (issue #38): when the held-out records use tools, the spoke's own
tool_call/exact and tool_call/schema_valid rows must not regress with confidence. Rows are built
by mens.eval.stats.paired over per-turn scores, as mens.eval.toolcalls writes them (the real
eval of those rows: tests/eval/test_toolcalls.py)."""
from __future__ import annotations

from types import SimpleNamespace

from mens.eval.stats import paired
from mens.gate.run import judge, stale

G = SimpleNamespace(metric="loss", min_gain=0.0, max_regression=0.05, guard_tasks=[])


def row(metric, base, tuned, higher_is_better=True, relative=False):
    return {"group": "in_domain", "name": f"agent/{metric}", "metric": metric, "spoke": "agent",
            "task": "agent", "higher_is_better": higher_is_better, "check": "tool_call",
            **paired(base, tuned, higher_is_better=higher_is_better, relative=relative, seed=1)}


def result(*rows, tool_calls=True):
    loss = row("loss", [2.0] * 40, [1.5] * 40, higher_is_better=False, relative=True)
    return {"rows": [loss, *rows], "spec": {"confidence": 0.95},
            "tool_calls": {"spoke": "agent", "turns": 80} if tool_calls else None}


def test_a_confident_regression_of_exact_calls_fails_the_gate():
    exact = row("tool_call/exact", [1] * 30 + [0] * 10, [1] * 10 + [0] * 30)   # 75 % → 25 %
    valid = row("tool_call/schema_valid", [1] * 40, [1] * 40)
    relevance = row("tool_call/relevance", [1] * 40, [0] * 40)   # reported, not guarded
    verdict, reasons, own, guards, metric, _ = judge(result(exact, valid, relevance), G, 20)
    assert metric == "loss" and own["name"] == "agent/loss"
    assert {g["metric"] for g in guards} == {"tool_call/exact", "tool_call/schema_valid"}
    assert verdict == "fail" and len(reasons) == 1
    assert reasons[0].startswith("in_domain agent/tool_call/exact: loses +0.500")
    assert "gate.max_regression=0.05" in reasons[0]


def test_calls_that_hold_or_improve_pass_and_noise_is_not_a_regression():
    exact = row("tool_call/exact", [0] * 40, [1] * 30 + [0] * 10)
    noisy = row("tool_call/schema_valid", [1, 0] * 20, [0, 1] * 19 + [1, 0])   # same rate
    verdict, reasons, *_ = judge(result(exact, noisy), G, 20)
    assert verdict == "pass" and reasons == []


def test_missing_tool_rows_fail_when_the_records_use_tools():
    """The eval found tools in the held-out records but wrote no tool-call rows (its template
    writes no calls): an absent guard could never fail, so its absence does."""
    r = result()
    r["tool_calls"]["skipped"] = "the chat template (x) writes no tool calls"
    verdict, reasons, *_ = judge(r, G, 20)
    assert verdict == "fail" and len(reasons) == 2
    assert "tool_call/exact" in reasons[0] and "writes no tool calls" in reasons[0]
    assert judge(result(tool_calls=False), G, 20)[0] == "pass"   # no tools: no guard


def test_an_eval_from_before_the_tool_rows_is_stale():
    from mens.config.compose import compose
    from mens.gate.run import eval_config

    need = eval_config(compose(["gate.guard_tasks=[]"]))
    have = {"artifact_sha256": "s", "models": ["base", "tuned"], "tool_calls": None,
            "spec": {k: need[k] for k in ("max_prompts", "k", "max_new_tokens", "temperature",
                                          "confidence", "seed", "limit", "num_fewshot",
                                          "include_path", "tasks", "collateral")}}
    assert stale(have, need, "s") is None
    old = {k: v for k, v in have.items() if k != "tool_calls"}
    assert "predates the tool-call rows" in stale(old, need, "s")
