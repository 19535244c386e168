"""The Evals tab's API (`GET /api/evals`) against the real app: each run's eval.json rows with
their intervals and its gate verdict; a base evaluated alone (no training run) is listed too;
a broken eval.json is said in its own row while the others still show."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from eval_util import fake_adapter, rows_a, rows_b, write_eval, write_gate
from mens.config.compose import compose
from mens.studio.app import build_app


@pytest.fixture()
def client(tmp_path):
    cfg = compose(["+hw=cpu", f"studio.runs={tmp_path / 'runs'}"])
    with TestClient(build_app(cfg, "127.0.0.1", 8090), base_url="http://127.0.0.1:8090") as c:
        yield c, tmp_path / "runs"


def fixture_run(runs, rid):
    """A run dir as the studio finds them (telemetry.jsonl) with an adapter to gate."""
    run = runs / rid
    run.mkdir(parents=True)
    (run / "telemetry.jsonl").write_text("")
    fake_adapter(run)
    return run


def test_evals_lists_rows_with_intervals_and_verdicts(client):
    c, runs = client
    a, b = fixture_run(runs, "d1/a_train"), fixture_run(runs, "d1/b_train")
    fixture_run(runs, "d1/c_train")                      # neither evaluated nor gated: absent
    ra, rb = rows_a(), rows_b()
    write_eval(a, ra)
    write_gate(a, ra[0])
    write_gate(b, rb[0], verdict="fail", reasons=["gain interval reaches 0", "other"])
    base = runs / "d2" / "10-00-00_eval"                 # `mens eval` of a base alone
    write_eval(base, ra[1:2])
    r = c.get("/api/evals")
    assert r.status_code == 200, r.text
    by = {x["id"]: x for x in r.json()["runs"]}
    assert set(by) == {"d1/a_train", "d1/b_train", "d2/10-00-00_eval"}
    shown = by["d1/a_train"]["eval"]["rows"]
    # every row, intervals included (and its reading as text)
    assert [{k: v for k, v in x.items() if k != "text"} for x in shown] == ra
    assert shown[0]["text"]["tuned"].startswith("70.0 [")      # and their one reading
    assert by["d1/a_train"]["gate"]["status"] == "pass"
    assert by["d1/a_train"]["gate"]["badge"].startswith("pass@1 gain +40.0 [")
    assert by["d1/b_train"]["eval"] is None and by["d1/b_train"]["gate"]["status"] == "fail"
    assert by["d1/b_train"]["gate"]["badge"] == "gate failed: gain interval reaches 0"
    assert by["d2/10-00-00_eval"]["gate"] is None
    assert by["d2/10-00-00_eval"]["eval"]["rows"][0]["name"] == "arc_easy/acc"

    (a / "eval.json").write_text('{"kind": "lm-eval"}')   # another tool's file
    by = {x["id"]: x for x in c.get("/api/evals").json()["runs"]}
    assert "not a mens eval.json" in by["d1/a_train"]["error"] and by["d1/a_train"]["eval"] is None
    assert by["d2/10-00-00_eval"]["eval"]["rows"]            # the others still shown


def test_compare_carries_the_eval_table(client, tiny_run):
    import shutil
    c, runs = client
    for name in ("a", "b"):
        shutil.copytree(tiny_run, runs / name, ignore=shutil.ignore_patterns("checkpoints"))
    ra = rows_a()
    write_eval(runs / "a", ra)
    d = c.post("/api/evals/compare", json={"runs": ["a", "b"]}).json()
    assert d["evals"]["metrics"][0]["cells"][0]["gain"] == ra[0]["gain"]
    assert d["evals"]["metrics"][0]["cells"][1] is None and "## Eval results" in d["markdown"]
