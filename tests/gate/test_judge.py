"""The gate's verdict on eval results (mens.gate.run.judge): significance of the in-domain gain,
confident regressions of the guards, unverified oracles — on results computed by mens.eval.stats
from item scores built here (what a real eval writes is tested in test_gate.py)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from mens.eval.stats import paired

G = SimpleNamespace(metric="auto", min_gain=0.0, max_regression=0.05, guard_tasks=["arc_easy"])
FLOOR = 20     # eval.min_items's default


def judge(res, g, min_items=FLOOR):
    from mens.gate.run import judge as gate_judge
    return gate_judge(res, g, min_items)


def row(group, name, metric, base, tuned, **kw):
    return {"group": group, "name": name, "metric": metric, "spoke": kw.pop("spoke", "vox_lang"),
            "task": kw.pop("task", None), "higher_is_better": True,
            **paired(base, tuned, seed=1), **kw}


def result(rows):
    return {"rows": rows, "spec": {"confidence": 0.95, "k": 4}}


def test_a_clear_gain_passes_and_noise_is_not_significant():
    clear = row("in_domain", "vox_lang/pass@1", "pass@1", [0] * 30 + [1] * 10, [1] * 30 + [0] * 10)
    verdict, reasons, own, _, metric, _ = judge(result([clear]), G)
    assert metric == "pass@1" and own == {**clear, "verdict": "significant (n=40)"}
    assert reasons == ["guard task arc_easy: no result in eval.json"]   # the only one
    noisy = row("in_domain", "vox_lang/pass@1", "pass@1", [0, 1] * 20, [1, 0] * 19 + [1, 1])
    verdict, reasons, *_ = judge(result([noisy]), SimpleNamespace(**{**vars(G), "guard_tasks": []}))
    assert verdict == "fail" and "not significant" in reasons[0] and "95% interval [-0.304, +0.351]" in reasons[0]


def test_a_confident_collateral_loss_fails_and_a_small_one_does_not():
    g = SimpleNamespace(**{**vars(G), "guard_tasks": []})
    own = row("in_domain", "vox_lang/pass@1", "pass@1", [0] * 40, [1] * 40)
    hurt = row("collateral", "structured_shell/greedy", "greedy", [1] * 40, [0] * 20 + [1] * 20,
               spoke="structured_shell")
    small = row("collateral", "rust_workspace/greedy", "greedy", [1] * 40, [0] + [1] * 39,
                spoke="rust_workspace")
    verdict, reasons, *_ = judge(result([own, hurt, small]), g)
    assert verdict == "fail" and len(reasons) == 1
    assert reasons[0].startswith("collateral structured_shell/greedy: loses +0.500")
    assert "gate.max_regression=0.05" in reasons[0]


def test_an_unverified_oracle_is_not_passed_and_guard_tasks_must_be_measured():
    own = {"group": "in_domain", "name": "vox_lang/pass@1", "metric": "pass@1", "n": 4,
           "spoke": "vox_lang", "check": "vox_parses",
           "unverified": {"base": 4, "tuned": 4, "prompts_left_out": 4, "reasons": ["no tool"]},
           "gain": {"value": None, "ci": None}}
    verdict, reasons, *_ = judge(result([own]), G)
    assert verdict == "fail" and "unverified is not passed" in reasons[0]
    assert reasons[-1] == "guard task arc_easy: no result in eval.json"


def test_without_an_oracle_auto_gates_the_loss():
    loss = {**row("in_domain", "file:mine/loss", "loss", [2.0] * 10, [1.5] * 10),
            "higher_is_better": False}
    _, _, own, _, metric, why = judge(result([loss]), SimpleNamespace(**{**vars(G), "guard_tasks": []}))
    assert metric == "loss" and own["name"] == loss["name"]
    assert "no oracle" in why


def test_at_the_floor_auto_gates_the_loss_and_says_why():
    """A model too weak for the oracle (no answer of either model passes: 0 − 0) cannot show a
    gain in pass@1 whatever it learned: auto gates the held-out loss, and says so."""
    g = SimpleNamespace(**{**vars(G), "guard_tasks": []})
    floor = {**row("in_domain", "vox_lang/pass@1", "pass@1", [0] * 40, [0] * 40),
             "check": "vox_parses"}
    loss = {**row("in_domain", "vox_lang/loss", "loss", [2.0] * 40, [1.9] * 40),
            "higher_is_better": False}
    verdict, reasons, own, _, metric, why = judge(result([floor, loss]), g)
    assert metric == "loss" and own["name"] == loss["name"] and "floor" in why
    assert "vox_parses" in why
    some = {**row("in_domain", "vox_lang/pass@1", "pass@1", [0] * 39 + [1], [0] * 40),
            "check": "vox_parses"}
    verdict, reasons, own, _, metric, why = judge(result([some, loss]), g)
    assert metric == "pass@1" and why is None and verdict == "fail"
    assert "too few to judge: 1 of 40 items differ between base and tuned < 6" in reasons[0]


# --- the floor: eval.min_items (issue #37) ------------------------------------------------------
NO_GUARDS = SimpleNamespace(**{**vars(G), "guard_tasks": [], "min_gain": 0.005})


def strongest(n: int) -> list[dict]:
    """The clearest gain n items can show: every prompt flips 0 → 1 (pass@1), every record's
    loss halves (the held-out loss of user data without an oracle)."""
    return [row("in_domain", "vox_lang/pass@1", "pass@1", [0] * n, [1] * n, check="vox_parses"),
            {"group": "in_domain", "name": "vox_lang/loss", "metric": "loss", "spoke": "vox_lang",
             "task": "vox_lang", "higher_is_better": False,
             **paired([20.0] * n, [10.0] * n, weights=[10] * n, higher_is_better=False,
                      relative=True)}]


def test_a_gate_over_1_3_or_19_items_never_says_significant_with_the_defaults():
    for n in (1, 3, 19):
        for metric in ("pass@1", "loss"):
            g = SimpleNamespace(**{**vars(NO_GUARDS), "metric": metric})
            verdict, reasons, own, *_ = judge(result(strongest(n)), g)
            assert verdict == "fail" and len(reasons) == 1, (n, metric, reasons)
            assert own["verdict"] == f"too few to judge: n={n} < eval.min_items=20"
            gain = "+1.000" if metric == "pass@1" else "+0.500"   # the share of loss removed
            assert reasons[0].startswith(f"in-domain vox_lang {metric}: gain {gain}, too few "
                                         f"to judge: n={n} < eval.min_items=20")
            assert "lower eval.min_items, which gate.json records" in reasons[0]
    # three prompts that each flip 0 → 1: the exact sign test's one-sided p is 1/8, said
    _, reasons, *_ = judge(result(strongest(3)[:1]), NO_GUARDS)
    assert "(exact one-sided p of no gain: 0.125)" in reasons[0]
    # from 20 items the same data pass, on McNemar's exact interval (issue #49: the
    # bootstrap's was the zero-width [1, 1])
    verdict, reasons, own, *_ = judge(result(strongest(20)), NO_GUARDS)
    assert verdict == "pass" and reasons == [] and own["verdict"] == "significant (n=20)"
    assert own["gain"]["method"] == "exact" and 0.5 < own["gain"]["ci"][0] < 1.0


def test_a_lowered_floor_judges_small_n_exactly():
    """eval.min_items=1: the exact test decides (McNemar's on 0/1 scores). Below 6 differing
    items at 95 % no exact test can call a gain (p ≥ 1/32 > 0.025), so 1, 3 and 5 items cannot
    pass whatever they show — too few differ to judge; 6 or 19 items that all gain do (p =
    1/64, 2^-19); 3 flips among 19 items do not (p = 1/8)."""
    for n, verdict, p in ((1, "fail", 0.5), (3, "fail", 0.125), (5, "fail", 1 / 32),
                          (6, "pass", 1 / 64), (19, "pass", 2 ** -19)):
        got, reasons, own, *_ = judge(result(strongest(n)[:1]), NO_GUARDS, min_items=1)
        assert got == verdict and own["gain"]["p"] == pytest.approx(p), (n, reasons)
        if verdict == "fail":
            why = (f"too few to judge: {n} of {n} items differ between base and tuned < 6, the "
                   f"fewest an exact paired test at 95% can tell from chance")
            assert own["verdict"] == why
            assert f", {why} (exact one-sided p of no gain" in reasons[0]
        else:
            assert own["verdict"] == f"significant (n={n})"
    few = row("in_domain", "vox_lang/pass@1", "pass@1", [0] * 19, [0] * 16 + [1] * 3)
    got, reasons, own, *_ = judge(result([few]), NO_GUARDS, min_items=1)
    assert got == "fail" and own["gain"]["p"] == pytest.approx(0.125)
    assert own["verdict"].startswith("too few to judge: 3 of 19 items differ")


def test_a_guard_that_cannot_judge_fails_the_gate():
    """Too few items, no interval (lm-eval's aggregate of a non-mean metric: the row
    mens.eval.harness writes), or nothing scored (the oracle could not run): each a failing
    reason, never a silent pass."""
    own = row("in_domain", "vox_lang/pass@1", "pass@1", [0] * 40, [1] * 40)
    few = row("collateral", "rust_workspace/loss", "loss", [2.0] * 3, [2.0] * 3,
              spoke="rust_workspace")
    corpus_f1 = {"group": "benchmark", "name": "my_f1/f1", "task": "my_f1", "metric": "f1",
                 "n": 200, "spoke": None, "higher_is_better": True,
                 "base": {"value": 0.5, "ci": None}, "tuned": {"value": 0.1, "ci": None},
                 "gain": {"value": -0.4, "ci": None, "n": 200, "method": None}}
    unverified = {"group": "collateral", "name": "rust_workspace/greedy", "metric": "greedy",
                  "n": 0, "spoke": "rust_workspace", "gain": {"value": None, "ci": None},
                  "unverified": {"base": 4, "tuned": 4, "prompts_left_out": 4,
                                 "reasons": ["`cargo` is not installed"]}}
    g = SimpleNamespace(**{**vars(G), "guard_tasks": ["my_f1"]})
    verdict, reasons, _, guards, *_ = judge(result([own, few, corpus_f1, unverified]), g)
    assert verdict == "fail" and len(reasons) == 3, reasons
    assert reasons[0].startswith("collateral rust_workspace/loss: too few to judge: n=3 < "
                                 "eval.min_items=20 — a guard that cannot judge fails the gate")
    assert reasons[1].startswith("benchmark my_f1/f1: cannot judge: no interval (n=200) — a "
                                 "guard that cannot judge fails the gate; lm-eval gives this "
                                 "metric no per-document values")
    assert reasons[2].startswith("collateral rust_workspace/greedy: cannot judge: nothing "
                                 "scored (n=0; its oracle could not run here: `cargo` is not")
    assert [r["verdict"] for r in guards] == [
        "too few to judge: n=3 < eval.min_items=20", "cannot judge: no interval (n=200)",
        "cannot judge (n=0)"]
    # the floor lowered to 1: 3 items still give no exact bound — a reason, with its fix
    _, reasons, *_ = judge(result([own, few]), SimpleNamespace(**{**vars(G), "guard_tasks": []}),
                           min_items=1)
    assert reasons == ["collateral rust_workspace/loss: cannot judge: no interval (n=3: too few "
                       "items for an exact bound) — a guard that cannot judge fails the gate; "
                       "score more items (gate.max_prompts, more held-out data; an lm-eval "
                       "task's eval.limit) or lower eval.min_items, which gate.json records"]
    # the same guard on 40 items with no loss: judged, and it does not fail the gate
    ok = row("collateral", "rust_workspace/loss", "loss", [2.0] * 40, [2.0] * 40,
             spoke="rust_workspace")
    verdict, reasons, _, guards, *_ = judge(result([own, ok]), SimpleNamespace(
        **{**vars(G), "guard_tasks": []}))
    assert verdict == "pass" and guards[0]["verdict"] == "no confident loss (n=40)"
