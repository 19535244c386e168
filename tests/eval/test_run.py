"""`mens eval` as users run it: a run's base and adapter on the same held-out items (rows with
intervals, eval.json / eval.md / eval.jsonl, a wandb run of job_type eval), a base alone, and
what it refuses."""
from __future__ import annotations

import json
import shutil

import pytest

from wandb_util import wandb_run

SMALL = ["eval.max_prompts=3", "eval.k=2", "eval.max_new_tokens=16", "eval.collateral=false"]


def test_a_run_is_evaluated_both_ways_with_intervals(mens_cli, tmp_path, tiny_run):
    run = shutil.copytree(tiny_run, tmp_path / "run")
    env = {"WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    p = mens_cli("mens.eval", f"run={run}", *SMALL, "logger=wandb", env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    ev = json.loads((run / "eval.json").read_text())
    assert ev["kind"] == "mens.eval" and ev["models"] == ["base", "tuned"]
    rows = {r["name"]: r for r in ev["rows"]}
    assert set(rows) == {"vox_lang/loss", "vox_lang/greedy", "vox_lang/pass@1", "vox_lang/pass@2"}
    for r in rows.values():
        assert r["n"] == 3 and r["group"] == "in_domain" and r["check"] == "vox_parses"
        for side in ("base", "tuned"):
            lo, hi = r[side]["ci"]
            assert lo <= r[side]["value"] <= hi, (r["name"], side, r[side])
        # 3 items: exact — the sign-flip test, which has no 95 % bound below 6 items, or on 0/1
        # scores McNemar's, whose interval cannot exclude 0 with fewer than 6 items that differ
        # — and the one-sided p-value of "no gain" (at least 1/8 on 3 items)
        for side in ("delta", "gain"):
            ci = r[side]["ci"]
            assert ci is None or ci[0] <= 0 <= ci[1], (r["name"], side, ci)
            assert r[side]["n"] == 3 and r[side]["method"] == "exact"
        assert 0.125 <= r["gain"]["p"] <= 1
    loss = rows["vox_lang/loss"]
    assert loss["tuned"]["value"] < loss["base"]["value"] and loss["higher_is_better"] is False
    # the gain of the loss is the share of the base's loss removed
    assert abs(loss["gain"]["value"] - (1 - loss["tuned"]["value"] / loss["base"]["value"])) < 1e-9
    items = ev["items"]["in_domain/vox_lang"]
    assert len(items) == 3 and all(len(it["tuned"]["samples"]) == 2 for it in items)
    assert {"loglik", "generate"} == set(ev["plan"]) and ev["plan"]["generate"]["batch"] >= 1
    md = (run / "eval.md").read_text()
    assert "| in_domain | vox_lang/pass@2 (%) | 3 |" in md and md.strip() in p.stdout
    # every verdict shows its n: 3 items are below eval.min_items (20), whatever they show
    assert "| too few to judge: n=3 < eval.min_items=20 · p=" in md
    w = wandb_run(run)
    assert w["run"].job_type == "eval" and w["run"].display_name == "eval-run"
    assert "eval/vox_lang/loss/gain" in w["summary"]
    # eval.json / eval.md are replaced, eval.jsonl keeps one line per evaluation
    from mens.eval.run import write
    write(run, {k: v for k, v in ev.items() if k != "items"} | {"rows": []}, {})
    log = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
    assert len(log) == 2 and "vox_lang/loss" in log[0]["metrics"] and log[1]["metrics"] == {}
    assert json.loads((run / "eval.json").read_text())["rows"] == []


def test_a_base_alone(mens_cli, tmp_path):
    out = tmp_path / "ev"
    p = mens_cli("mens.eval", "+hw=cpu", "eval.max_prompts=2", "eval.k=1",
                 "eval.max_new_tokens=8", "eval.collateral=false", "logger=csv",
                 f"hydra.run.dir={out}", env={"OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    ev = json.loads((out / "eval.json").read_text())
    assert ev["run"] is None and ev["models"] == ["base"] and ev["rung"] == "tiny"
    for r in ev["rows"]:
        assert "tuned" not in r and "gain" not in r and r["n"] == 2 and r["base"]["ci"]


def test_what_it_refuses(mens_cli, tmp_path):
    p = mens_cli("mens.eval", f"run={tmp_path}")
    assert p.returncode == 2 and "not a finished training run" in p.stderr
    p = mens_cli("mens.eval", "eval.k=-1", "+hw=cpu", f"run={tmp_path}")
    assert p.returncode == 2 and "eval.k" in p.stderr
    p = mens_cli("mens.eval", "gate.metric=pass@3")
    assert p.returncode == 2 and "gate.metric" in p.stderr
    # offline, a task whose data is not cached: one paragraph naming the dataset, before weights
    p = mens_cli("mens.eval", "+hw=cpu", "eval.tasks=[hellaswag]", "logger=csv",
                 env={"HF_HUB_OFFLINE": "1"})
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    [line] = [x for x in p.stderr.splitlines() if x.startswith("mens: error (exit 2)")]
    assert "`Rowan/hellaswag`" in line and "datasets.load_dataset('Rowan/hellaswag')" in line


@pytest.mark.slow   # ~55 s (a tiny eval + four judge calls); tests/eval/test_judge.py is the fast one
def test_the_judge_through_mens_eval(mens_cli, tmp_path, tiny_run):
    """`mens eval … eval.judge=teacher teacher=endpoint …` against a scripted OpenAI-compatible
    server on 127.0.0.1 (tests/teacher_server.py, a real HTTP server standing in for a paid
    judge): each held-out prompt is asked in both orders; a judge that always names the first
    answer ties everything (position bias cancelled); the key comes from the environment only."""
    import secrets

    from teacher_server import replay_server

    run = shutil.copytree(tiny_run, tmp_path / "run")
    key = "sk-test-" + secrets.token_hex(8)
    reply = {"json": {"winner": "A", "reason": "the first answer is clearer"},
             "usage": {"prompt_tokens": 120, "completion_tokens": 12}}
    with replay_server([{"model": "judge", "replies": [reply]}], api_key=key) as srv:
        p = mens_cli("mens.eval", f"run={run}", "eval.max_prompts=2", "eval.k=1",
                     "eval.max_new_tokens=8", "eval.collateral=false", "eval.judge=teacher",
                     "eval.judge_prompts=2", "teacher=endpoint", f"teacher.base_url={srv.base_url}",
                     "teacher.model=judge", "teacher.api_key_env=MENS_JUDGE_KEY", "logger=csv",
                     env={"MENS_JUDGE_KEY": key, "OMP_NUM_THREADS": "1"})
        assert p.returncode == 0, p.stderr[-3000:]
        bodies = [r["body"] for r in srv.requests]
    ev = json.loads((run / "eval.json").read_text())
    [row] = [r for r in ev["rows"] if r["group"] == "judge"]
    assert len(bodies) == 4 and row["n"] == 2 and row["counts"]["tie"] == 2
    assert row["tuned"]["value"] == 0.5 and row["gain"]["ci"] == [0.0, 0.0]
    items = ev["items"]["in_domain/vox_lang"]
    shown = [b["messages"][-1]["content"] for b in bodies]
    for it in items:    # each prompt's two answers, each shown first once
        a, t = it["base"]["greedy"]["text"], it["tuned"]["greedy"]["text"]
        assert any(f"<answer_a>{a}</answer_a>" in s for s in shown)
        assert any(f"<answer_a>{t}</answer_a>" in s for s in shown)
    assert all("mens_judgement" == b["response_format"]["json_schema"]["name"] for b in bodies)
    assert key not in (run / "eval.json").read_text() and ev["judge"]["stats"]
