"""Eval results in `mens compare` across runs: one row per metric name, one column per run,
each cell the tuned value with its interval and the gain with its paired interval, and the
runs' gate verdicts (pass with its gain, fail with its first reason, void after a retrain).
Fixture eval.json / gate.json files in the shapes mens eval / mens gate write (eval_util)."""
from __future__ import annotations

import json
import shutil

import pytest

from eval_util import fake_adapter, rows_a, rows_b, write_eval, write_gate
from mens.compare.evals import badge, eval_table, evals_md, read_eval
from mens.errors import ConfigError


def ci_text(stat, signed=False):
    """A rate's interval as the table must print it (mens.run.evalrow's one reading: percent,
    a gain in points), formatted here independently."""
    f = "+.1f" if signed else ".1f"
    pts = [format(100 * x, f) for x in (stat["value"], *stat["ci"])]
    return f"{pts[0]} [{pts[1]}, {pts[2]}]" + (" pts" if signed else "")


@pytest.fixture
def two_runs(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for run in (a, b):
        fake_adapter(run)
    ra, rb = rows_a(), rows_b()
    write_eval(a, ra)
    write_eval(b, rb)
    write_gate(a, ra[0])
    write_gate(b, rb[0], verdict="fail",
               reasons=["vox_lang/pass@1 gain +0.100 [-0.150, +0.350]: the interval reaches 0",
                        "second reason"])
    return a, b, ra, rb


def test_table_one_row_per_metric_one_column_per_run(two_runs):
    a, b, ra, rb = two_runs
    t = eval_table([a, b], ["a", "b"])
    names = [m["name"] for m in t["metrics"]]
    # the in-domain metric first, then benchmark, collateral, judge; each name once
    assert names == ["vox_lang/pass@1", "arc_easy/acc", "code_en/loss", "judge/win_rate"]
    by = {m["name"]: m for m in t["metrics"]}
    assert by["vox_lang/pass@1"]["cells"][0]["tuned"] == ra[0]["tuned"]
    assert by["vox_lang/pass@1"]["cells"][1]["gain"] == rb[0]["gain"]
    assert by["arc_easy/acc"]["cells"][1] is None and by["judge/win_rate"]["cells"][0] is None
    assert by["code_en/loss"]["higher_is_better"] is False
    # pass@1 14/20 tuned vs 6/20 base: the real bootstrap's interval sits around the value
    cell = by["vox_lang/pass@1"]["cells"][0]
    assert cell["tuned"]["value"] == pytest.approx(0.7) and cell["gain"]["value"] == pytest.approx(0.4)
    assert cell["gain"]["ci"][0] < 0.4 < cell["gain"]["ci"][1] and cell["n"] == 20

    md = "\n".join(evals_md(t))
    row = next(x for x in md.splitlines() if x.startswith("| vox_lang/pass@1"))
    assert row.count("|") == 4                          # metric + two runs
    for r in (ra[0], rb[0]):
        assert f"{ci_text(r['tuned'])}<br>gain {ci_text(r['gain'], signed=True)}<br>n 20" in row
    loss = next(x for x in md.splitlines() if x.startswith("| code_en/loss"))
    assert "(collateral, ↓)" in loss and loss.endswith("| — |")
    # the gate verdicts: a pass shows the gated gain with its interval, a fail its first reason
    gates = next(x for x in md.splitlines() if x.startswith("| gate |"))
    assert f"pass: pass@1 gain {ci_text(ra[0]['gain'], signed=True)}" in gates
    assert "fail: gate failed: vox_lang/pass@1 gain +0.100 [-0.150, +0.350]" in gates
    assert "second reason" not in gates


def test_void_and_ungated_and_none(two_runs, tmp_path):
    a, b, *_ = two_runs
    (b / "gate.json").unlink()
    with open(a / "adapter" / "adapter_model.safetensors", "ab") as f:   # retrained since
        f.write(b"\0")
    t = eval_table([a, b], ["a", "b"])
    assert t["gates"][0]["status"] == "void" and "changed" in t["gates"][0]["badge"]
    assert t["gates"][1] is None and "| gate | void: " in "\n".join(evals_md(t))
    assert "not gated |" in "\n".join(evals_md(t))
    c = tmp_path / "c"
    fake_adapter(c)
    assert eval_table([c, tmp_path / "d"], ["c", "d"]) is None and evals_md(None) == []


def test_stat_text():
    from mens.run.evalrow import gain_text, value_text
    assert value_text({"value": 0.5, "ci": [0.25, 0.75]}, True) == "50.0 [25.0, 75.0]"
    assert gain_text({"value": -0.01, "ci": [-0.05, 0.02]}, True) == "-1.0 [-5.0, +2.0] pts"
    assert value_text({"value": 12345.6, "ci": None}, False) == "12345.6000"
    assert value_text(None, True) == "—" and value_text({"value": None, "ci": None}, True) == "—"


def test_badge():
    row = {"metric": "pass@1", "gain": {"value": 0.12, "ci": [0.04, 0.2]}}
    assert badge({"metric": "pass@1", "in_domain": row}, "pass") == "pass@1 gain +12.0 [+4.0, +20.0] pts"
    assert badge({"reasons": ["a", "b"]}, "fail") == "gate failed: a"
    assert badge({"reasons": []}, "fail") == "gate failed (no reason recorded)"
    assert badge({"verdict": "pass"}, "pass") == "gate passed"     # an older receipt: no row
    assert badge(None, "none") is None and "changed" in badge({"verdict": "pass"}, "void")


def test_a_file_that_is_not_a_mens_eval_json_is_a_config_error(tmp_path):
    (tmp_path / "eval.json").write_text(json.dumps({"results": {"arc_easy": {"acc": 0.5}}}))
    with pytest.raises(ConfigError, match="not a mens eval.json"):
        read_eval(tmp_path)
    (tmp_path / "eval.json").write_text("{half")
    with pytest.raises(ConfigError, match="is not JSON"):
        read_eval(tmp_path)
    assert read_eval(tmp_path / "nothing") is None


def _copy(run, dest):
    shutil.copytree(run, dest, ignore=shutil.ignore_patterns("checkpoints"))
    return dest


def test_cli_across_runs_shows_evals_and_verdicts(mens_cli, tmp_path, tiny_run):
    a, b = _copy(tiny_run, tmp_path / "runs" / "a"), _copy(tiny_run, tmp_path / "runs" / "b")
    ra = rows_a()
    write_eval(a, ra)
    write_gate(a, ra[0])
    out = tmp_path / "cmp"
    r = mens_cli("mens.compare", str(a), str(b), "logger=none", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "compare.json").read_text())
    ev = res["evals"]
    assert ev["runs"] == ["a", "b"] and ev["evals"] == [str(a / "eval.json"), None]
    assert [m["name"] for m in ev["metrics"]][0] == "vox_lang/pass@1"
    assert ev["gates"][0]["status"] == "pass" and ev["gates"][1] is None
    md = (out / "compare.md").read_text()
    assert "## Eval results" in md and md in r.stdout
    assert f"{ci_text(ra[1]['tuned'])}<br>gain {ci_text(ra[1]['gain'], signed=True)}" in md
    assert "| gate | pass: pass@1 gain" in md and "| not gated |" in md

    # a broken eval.json: exit 2 naming the file, no traceback
    (b / "eval.json").write_text("{}")
    r = mens_cli("mens.compare", str(a), str(b), "logger=none", f"hydra.run.dir={out}")
    assert r.returncode == 2 and f"{b / 'eval.json'} is not a mens eval.json" in r.stderr
    assert "Traceback" not in r.stderr
