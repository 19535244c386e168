"""The pairwise judge (mens.eval.judge) against a real OpenAI-compatible server on 127.0.0.1
(tests/teacher_server.py, scripted replies) through the real teacher client and cascade."""
from __future__ import annotations

import secrets
import socket
from types import SimpleNamespace

import pytest

from synth.teacher.teacher_util import KEY_ENV, candidate, teacher_cfg
from teacher_server import replay_server

EV = SimpleNamespace(confidence=0.95, bootstrap=500, seed=0)   # cfg.eval's interval keys
PROMPTS = [[{"role": "system", "content": "be brief"}, {"role": "user", "content": f"q{i}"}]
           for i in range(3)]
BASE = [f"base-answer-{i}" for i in range(3)]
TUNED = [f"tuned-answer-{i}" for i in range(3)]


@pytest.fixture
def teacher_for(monkeypatch):
    """A Teacher over one scripted replay server (model `judge`, priced), and the server."""
    from mens.synth.teacher import Teacher

    key = "sk-test-" + secrets.token_hex(8)
    monkeypatch.setenv(KEY_ENV, key)
    servers = []

    def make(scripts):
        cm = replay_server([{"model": "judge", **s} for s in scripts], api_key=key)
        srv = cm.__enter__()
        servers.append(cm)
        cfg = teacher_cfg(candidate(srv, "judge", price_in_per_mtok=1.0, price_out_per_mtok=2.0))
        return Teacher.from_config(cfg), srv
    yield make
    for cm in servers:
        cm.__exit__(None, None, None)


def verdict(winner, reason, **kw):
    return {"json": {"winner": winner, "reason": reason},
            "usage": {"prompt_tokens": 100, "completion_tokens": 10}, **kw}


def test_both_orders_are_asked_and_position_bias_cancels(teacher_for):
    from mens.eval.judge import judge

    teacher, srv = teacher_for([{"replies": [verdict("A", "the first one reads better")]}])
    out = judge(teacher, PROMPTS, BASE, TUNED, EV)
    bodies = [r["body"] for r in srv.requests]
    assert len(bodies) == 6 and all(b["response_format"]["json_schema"]["name"] ==
                                    "mens_judgement" for b in bodies)
    firsts = sorted(b["messages"][-1]["content"].split("<answer_a>")[1].split("</answer_a>")[0]
                    for b in bodies)
    assert firsts == sorted(BASE + TUNED)               # each answer was A once
    row = out["rows"][0]
    assert row["name"] == "judge/win_rate" and row["group"] == "judge" and row["n"] == 3
    assert row["counts"] == {"win": 0, "tie": 3, "loss": 0, "inconsistent": 3, "invalid": 0}
    assert row["tuned"] == {"value": 0.5, "ci": [0.5, 0.5], "n": 3, "method": "bootstrap"}
    assert row["gain"]["value"] == 0
    assert all(p["outcome"] == "tie" and p["consistent"] is False for p in out["pairs"])


def test_a_judge_preferring_the_tuned_answer_and_its_cost(teacher_for):
    from mens.eval.judge import judge

    teacher, _ = teacher_for([
        {"match": "<answer_a>tuned", "replies": [verdict("A", "A is tuned: correct")]},
        {"match": "<answer_b>tuned", "replies": [verdict("B", "B is tuned: correct")]}])
    out = judge(teacher, PROMPTS, BASE, TUNED, EV)
    row = out["rows"][0]
    # three wins of three: an exact (Clopper-Pearson) interval, not the bootstrap's [1, 1]
    from scipy.stats import binomtest
    lo = binomtest(3, 3).proportion_ci(0.95, method="exact").low
    # (mens.eval.binomial's, equal to scipy's to the last bits)
    assert row["tuned"] == {"value": 1.0, "ci": pytest.approx([lo, 1.0], abs=1e-12), "n": 3,
                            "method": "exact"}
    assert row["gain"] == {"value": 0.5, "ci": pytest.approx([lo - 0.5, 0.5], abs=1e-12)}
    assert row["counts"]["win"] == 3 and row["counts"]["inconsistent"] == 0
    for p, b, t in zip(out["pairs"], BASE, TUNED):
        assert (p["base"], p["tuned"], p["outcome"], p["consistent"]) == (b, t, "win", True)
        assert [(v["a"], v["winner"], v["prefers"], v["reason"]) for v in p["verdicts"]] == [
            ("base", "B", "tuned", "B is tuned: correct"),
            ("tuned", "A", "tuned", "A is tuned: correct")]
    stats = out["stats"]
    assert stats["calls"] == 6 and stats["prompt_tokens"] == 600
    assert stats["completion_tokens"] == 60 and stats["teachers"] == ["judge"]
    assert stats["cost_usd"] == pytest.approx(6 * (100 * 1.0 + 10 * 2.0) / 1e6)
    assert stats["ledger"]["cost_usd"] == pytest.approx(stats["cost_usd"])
    assert row["stats"] == stats


def test_win_tie_loss_and_an_unusable_reply(teacher_for, capsys):
    """q0: tuned wins both orders; q1: base wins both; q2: a tie and a reply that is not JSON
    (left out as invalid, its raw text kept, said on stderr)."""
    from mens.eval.judge import judge

    teacher, _ = teacher_for([
        {"match": "<answer_a>tuned-answer-0", "replies": [verdict("A", "tuned better")]},
        {"match": "<answer_b>tuned-answer-0", "replies": [verdict("B", "tuned better")]},
        {"match": "<answer_a>base-answer-1", "replies": [verdict("A", "base better")]},
        {"match": "<answer_b>base-answer-1", "replies": [verdict("B", "base better")]},
        {"match": "<answer_a>base-answer-2", "replies": [verdict("tie", "same")]},
        {"match": "<answer_a>tuned-answer-2", "replies": [{"content": "I think A."}]}])
    out = judge(teacher, PROMPTS, BASE, TUNED, EV)
    row = out["rows"][0]
    assert [p["outcome"] for p in out["pairs"]] == ["win", "loss", "invalid"]
    assert row["counts"] == {"win": 1, "tie": 0, "loss": 1, "inconsistent": 0, "invalid": 1}
    assert row["n"] == 2 and row["tuned"]["value"] == 0.5
    bad = out["pairs"][2]["verdicts"][1]
    assert bad["winner"] is None and bad["raw"] == "I think A." and bad["problems"]
    assert "no usable verdict for 1 of 3 prompt(s)" in capsys.readouterr().err


def test_an_unreachable_judge_is_a_config_error():
    from mens.errors import ConfigError
    from mens.eval.judge import judge
    from mens.synth.teacher import Teacher

    with socket.socket() as s:                      # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    teacher = Teacher.from_config(teacher_cfg(candidate(url, "judge", api_key_env=None)))
    with pytest.raises(ConfigError) as e:
        judge(teacher, PROMPTS[:1], BASE[:1], TUNED[:1], EV)
    assert e.value.key == "teacher" and "eval judge" in e.value.message
    assert url in e.value.message and "cannot connect" in e.value.message
    assert "teacher=custom" in e.value.message          # the tier, as the cascade names it
