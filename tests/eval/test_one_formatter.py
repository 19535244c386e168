"""One eval row, one reading (issue #42): the same metric row of a real tiny run's eval.json /
gate.json reads the same string in eval.md (what `mens eval` prints), the gate's receipt, the
pushed model card, `mens compare`, the ladder and the studio's API — all through
mens.run.evalrow. The expected strings are formatted here independently of it."""
from __future__ import annotations

import json

from eval_util import rows_a, write_eval, write_gate
from train_util import run_copy


def pct(x: float, signed: bool = False) -> str:
    return format(100 * x, "+.1f" if signed else ".1f")


def test_one_row_reads_the_same_in_all_six(tiny_run, tmp_path, compose):
    from fastapi.testclient import TestClient

    from mens.compare.evals import eval_table, evals_md
    from mens.eval.report import render_md
    from mens.gate.run import render as gate_render
    from mens.ladder.state import ladder
    from mens.ladder.state import render as ladder_render
    from mens.push.card import model_card
    from mens.studio.app import build_app

    root = tmp_path / "runs"
    run = run_copy(tiny_run, root / "2026-12-01" / "10-00-00_train")
    row = rows_a()[0]                                       # vox_lang/pass@1: 6/20 → 14/20
    write_eval(run, [row])
    write_gate(run, row)
    t, g = row["tuned"], row["gain"]
    tuned = f"{pct(t['value'])} [{pct(t['ci'][0])}, {pct(t['ci'][1])}]"
    gain = f"{pct(g['value'], True)} [{pct(g['ci'][0], True)}, {pct(g['ci'][1], True)}] pts"

    eval_md = render_md(json.loads((run / "eval.json").read_text()))
    receipt = gate_render(json.loads((run / "gate.json").read_text()))
    card = model_card(run, "me/one-row")
    compare = "\n".join(evals_md(eval_table([run], ["a"])))
    cells = ladder(compose(["+hw=cpu", "hw.memory_gb=24", f"ladder.runs={root}"]),
                   ["tiny"], ["vox_lang"])
    board = ladder_render(cells)
    cfg = compose(["+hw=cpu", f"studio.runs={root}"])
    with TestClient(build_app(cfg, "127.0.0.1", 8090), base_url="http://127.0.0.1:8090") as c:
        [shown] = c.get("/api/evals").json()["runs"]
    studio = shown["eval"]["rows"][0]["text"]

    for where, text in (("eval.md", eval_md), ("gate", receipt), ("card", card),
                        ("compare", compare)):
        assert tuned in text and gain in text, (where, tuned, gain, text)
    assert f"{tuned}<br>gain {gain}<br>n 20" in compare
    # the ladder shows the gated gain on its cell (the badge) and in its table
    assert cells["cells"][0]["gate"]["badge"] == f"pass@1 gain {gain}"
    assert f"pass: pass@1 gain {gain.removesuffix(' pts')}" in board   # rich wraps the unit
    assert studio["tuned"] == tuned and studio["gain"] == gain
    assert shown["gate"]["badge"] == f"pass@1 gain {gain}"
    assert shown["eval"]["rows"][0]["tuned"] == t            # the numbers stay for the chart


def test_each_kind_of_number_reads_in_its_own_units():
    """A rate in percent and its gain in points; a loss with 4 decimals and its (relative) gain
    in %; an lm-eval perplexity — not a fraction, its gain an absolute difference as the
    harness's aggregate row carries it — in its own units, never ×100 (it read "1234.0" once)."""
    from mens.eval.report import render_md
    from mens.run.evalrow import MetricRow

    def row(name, metric, hib, base, tuned, gain, ci=None):
        side = lambda v: {"value": v, "ci": ci and [v - ci, v + ci], "n": 40}   # noqa: E731
        return {"name": name, "group": "benchmark", "task": name.split("/")[0], "metric": metric,
                "n": 40, "higher_is_better": hib, "base": side(base), "tuned": side(tuned),
                "gain": side(gain), "version": None}

    acc = row("arc_easy/acc", "acc", True, 0.55, 0.59, 0.04, ci=0.05)
    loss = row("calc/loss", "loss", False, 1.6, 1.4, 0.125, ci=0.05)
    ppl = row("wikitext/word_perplexity", "word_perplexity", False, 12.34, 10.34, 2.0)
    texts = {r["name"]: MetricRow.of(r).display() for r in (acc, loss, ppl)}
    assert texts["arc_easy/acc"]["tuned"] == "59.0 [54.0, 64.0]"
    assert texts["arc_easy/acc"]["gain"] == "+4.0 [-1.0, +9.0] pts"
    assert texts["calc/loss"]["tuned"] == "1.4000 [1.3500, 1.4500]"
    assert texts["calc/loss"]["gain"] == "+12.5 [+7.5, +17.5] %"
    assert texts["wikitext/word_perplexity"] == {"base": "12.3400", "tuned": "10.3400",
                                                 "delta": "—", "gain": "+2.0000"}
    md = render_md({"run": "r", "rung": "tiny", "spoke": "calc", "lane": "lora",
                    "models": ["base", "tuned"], "duration_s": 1, "rows": [acc, loss, ppl]})
    assert "| wikitext/word_perplexity | 40 | 12.3400 | 10.3400 | +2.0000 |" in md
    assert "| arc_easy/acc (%) | 40 |" in md
