"""The gate's verdict on eval results (mens.gate.run.judge): significance of the in-domain gain,
confident regressions of the guards, unverified oracles — on results computed by mens.eval.stats
from item scores built here (what a real eval writes is tested in test_gate.py)."""
from __future__ import annotations

from types import SimpleNamespace

from mens.eval.stats import paired
from mens.gate.run import judge

G = SimpleNamespace(metric="auto", min_gain=0.0, max_regression=0.05, guard_tasks=["arc_easy"])


def row(group, name, metric, base, tuned, **kw):
    return {"group": group, "name": name, "metric": metric, "spoke": kw.pop("spoke", "vox_lang"),
            "task": kw.pop("task", None), "higher_is_better": True,
            **paired(base, tuned, seed=1), **kw}


def result(rows):
    return {"rows": rows, "spec": {"confidence": 0.95, "k": 4}}


def test_a_clear_gain_passes_and_noise_is_not_significant():
    clear = row("in_domain", "vox_lang/pass@1", "pass@1", [0] * 30 + [1] * 10, [1] * 30 + [0] * 10)
    verdict, reasons, own, _, metric, _ = judge(result([clear]), G)
    assert metric == "pass@1" and own is clear
    assert reasons == ["guard task arc_easy: no result in eval.json"]   # the only one
    noisy = row("in_domain", "vox_lang/pass@1", "pass@1", [0, 1] * 20, [1, 0] * 19 + [1, 1])
    verdict, reasons, *_ = judge(result([noisy]), SimpleNamespace(**{**vars(G), "guard_tasks": []}))
    assert verdict == "fail" and "not significant" in reasons[0] and "95% interval [-0.275, +0.350]" in reasons[0]


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
    assert metric == "loss" and own is loss
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
    assert metric == "loss" and own is loss and "floor" in why and "vox_parses" in why
    some = {**row("in_domain", "vox_lang/pass@1", "pass@1", [0] * 39 + [1], [0] * 40),
            "check": "vox_parses"}
    verdict, reasons, own, _, metric, why = judge(result([some, loss]), g)
    assert metric == "pass@1" and why is None and verdict == "fail"
    assert "a confident loss" in reasons[0] or "not significant" in reasons[0]
