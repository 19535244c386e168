"""Teacher routing tiers: the shipped `teacher=` options compose into cascades, a failing
candidate falls through to the next (recorded), an exhausted cascade is one ConfigError (exit 2)
naming every endpoint and why, and no key value ever reaches a file, a message or the ledger."""
from __future__ import annotations

import json
import socket

import pytest
from omegaconf import OmegaConf

from mens.errors import ConfigError
from mens.synth.teacher import Teacher
from teacher_server import replay_server
from synth.teacher.teacher_util import KEY_ENV, candidate, teacher_cfg

ASK = [{"role": "user", "content": "Give samples."}]
TIERS = ["free", "efficient", "balanced", "genius", "auto", "local"]


def closed_port_url() -> str:
    """A 127.0.0.1 URL nothing listens on (bound, then closed: connections are refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize("tier", TIERS)
def test_shipped_tiers_compose_into_cascades(compose, tier):
    cfg = compose([f"teacher={tier}"])
    assert cfg.teacher.tier == tier
    t = Teacher.from_config(cfg.teacher)
    names = [e.name for e in t.endpoints]
    assert len(names) >= 2 and len(set(names)) == len(names)
    for e in t.endpoints:
        assert e.base_url.startswith(("https://", "http://127.0.0.1:"))
        priced = (e.price_in_per_mtok, e.price_out_per_mtok)
        if priced != (None, None):                     # prices are dated and sourced, or null
            assert None not in priced and e.price_date and e.price_source, e.name
        if e.api_key_env:
            assert e.api_key_env.isupper()             # a variable's name, never a key
    if tier == "local":
        assert names[0] == "ollama-local" and t.endpoints[0].base_url == \
            "http://127.0.0.1:11434/v1"
    else:
        assert any(e.base_url.startswith("https://") for e in t.endpoints)


def test_auto_is_the_default_and_prefer_local_goes_first(compose):
    assert compose([]).teacher.tier == "auto"
    names = [e.name for e in Teacher.from_config(compose(["teacher=free"]).teacher).endpoints]
    local = [e.name for e in Teacher.from_config(
        compose(["teacher=free", "teacher.prefer_local=true"]).teacher).endpoints]
    assert local == ["ollama-local", "mens-serve", *names]
    auto = [e.name for e in Teacher.from_config(
        compose(["teacher.prefer_local=true"]).teacher).endpoints]
    assert auto[:2] == ["ollama-local", "mens-serve"] and auto.count("ollama-local") == 1


def test_endpoint_interface(compose, server, key):
    cfg = compose(["teacher=endpoint", f"teacher.base_url={server.base_url}",
                   "teacher.model=good", f"teacher.api_key_env={KEY_ENV}",
                   "teacher.backoff_s=0"])
    t = Teacher.from_config(cfg.teacher)
    r = t.ask("mens_samples", ASK)
    assert r.ok and r.teacher == "endpoint" and r.mode == "json_schema"
    assert server.requests[-1]["authorized"]          # the key was sent ...


def test_a_plain_dict_is_enough(server):
    t = Teacher.from_config({"tier": "endpoint", "base_url": server.base_url, "model": "good",
                             "api_key_env": KEY_ENV})
    assert t.concurrency == 4 and t.ask("mens_samples", ASK).ok


def test_endpoint_needs_url_and_model(compose):
    with pytest.raises(ConfigError) as e:
        Teacher.from_config(compose(["teacher=endpoint", "teacher.model=m"]).teacher)
    assert e.value.key == "teacher.base_url" and "teacher=endpoint teacher.base_url=URL" in \
        e.value.message
    with pytest.raises(ConfigError) as e:
        Teacher.from_config(compose(["teacher=free", "teacher.model=m"]).teacher)
    assert e.value.key == "teacher.model" and "only with `teacher=endpoint`" in e.value.message


def test_a_key_in_place_of_a_variable_name_is_refused_unechoed(compose):
    secret = "sk-proj-abc123def456"
    with pytest.raises(ConfigError) as e:
        Teacher.from_config(compose(["teacher=endpoint", "teacher.base_url=http://x/v1",
                                     "teacher.model=m", f"teacher.api_key_env={secret}"]).teacher)
    assert e.value.key == "teacher.api_key_env" and secret not in e.value.message
    assert "NAME of an environment variable" in e.value.message


def test_unknown_capability_is_refused(server):
    with pytest.raises(ConfigError) as e:
        Teacher.from_config(teacher_cfg(candidate(server, "good", capabilities=["tools"])))
    assert e.value.key == "teacher.candidates[0].capabilities"


def test_failures_fall_through_in_order_and_are_recorded(server, make_teacher, monkeypatch,
                                                         capsys):
    monkeypatch.setenv("MENS_TEST_WRONG_KEY", "sk-wrong-" + "9" * 20)
    t = make_teacher(
        candidate(closed_port_url(), "good", name="refused"),
        candidate(server, "good", name="no-key", api_key_env="MENS_TEST_UNSET_VAR"),
        candidate(server, "good", name="wrong-key", api_key_env="MENS_TEST_WRONG_KEY"),
        candidate(server, "no-such-model", name="missing-model"),
        candidate(server, "down", name="overloaded"),
        candidate(server, "good", name="works"))
    r = t.ask("mens_samples", ASK)
    assert r.ok and r.teacher == "works"
    d = t.ledger.as_dict()
    hops = [(f["from"], f["to"]) for f in d["fallthroughs"]]
    assert hops == [("refused", "no-key"), ("no-key", "wrong-key"),
                    ("wrong-key", "missing-model"), ("missing-model", "overloaded"),
                    ("overloaded", "works")]
    reasons = [f["reason"] for f in d["fallthroughs"]]
    assert reasons[0].startswith("cannot connect to http://127.0.0.1:")
    assert reasons[1] == "the environment variable MENS_TEST_UNSET_VAR (its key) is not set"
    assert reasons[2] == "401 Unauthorized: the key in $MENS_TEST_WRONG_KEY was refused"
    assert reasons[3].startswith("404 Not Found: model no-such-model")
    assert reasons[4] == "503 The server is overloaded — still after 2 retries"
    assert d["teachers"]["overloaded"]["retries"] == 2
    assert all(d["teachers"][n]["fallthroughs"] == 1 for n, _ in hops)
    err = capsys.readouterr().err
    assert "mens: note: teacher refused failed (cannot connect" in err and "trying no-key" in err
    n = len(server.requests)
    assert t.ask("mens_samples", ASK).teacher == "works"     # failed ones are not asked again
    assert len(server.requests) == n + 1


@pytest.mark.parametrize("case, reason", [
    ("refused", "cannot connect to http://127.0.0.1:"),
    ("unauthorized", "401 Unauthorized: the key in $MENS_TEST_TEACHER_KEY was refused"),
    ("no_model", "404 Not Found: model no-such-model"),
])
def test_exhausted_cascade_is_one_paragraph_exit_2(case, reason, key, monkeypatch):
    with replay_server([{"model": "good", "replies": [{"json": {"subtopics": []}}]}],
                       api_key=key) as srv:
        if case == "unauthorized":
            monkeypatch.setenv(KEY_ENV, "sk-not-the-right-one-0000")
        url = closed_port_url() if case == "refused" else srv.base_url
        model = "no-such-model" if case == "no_model" else "good"
        t = Teacher.from_config(teacher_cfg(candidate(url, model, name="only")))
        with pytest.raises(ConfigError) as e:
            t.ask("mens_subtopics", ASK)
        if case == "unauthorized":
            assert srv.requests and not srv.requests[-1]["authorized"]
    err = e.value
    assert err.code == 2 and err.key == "teacher" and "\n" not in err.message
    assert err.message.startswith("No teacher could answer (teacher=custom, 1 candidate tried")
    assert f"only ({url}, model {model}): {reason}" in err.message
    assert "teacher=endpoint teacher.base_url=URL" in err.message
    assert key not in err.message and "sk-not-the-right-one" not in err.message


def test_exhausted_batch_raises_and_names_every_endpoint(server, make_teacher):
    t = make_teacher(candidate(closed_port_url(), "good", name="a"),
                     candidate(server, "nope", name="b"), concurrency=3)
    with pytest.raises(ConfigError) as e:
        t.ask_many([("mens_samples", ASK)] * 5)
    assert "a (http://127.0.0.1:" in e.value.message and "b (" in e.value.message
    assert "2 candidates tried in order" in e.value.message
    assert len(t.ledger.fallthroughs) == 2            # each failure recorded once


def test_no_key_value_is_written_anywhere(server, key, make_teacher, monkeypatch, tmp_path,
                                          capfd):
    """The right key (proved sent: the server answers 401 without it) and a wrong one: neither
    value appears in the ledger file, the messages, or anything else written under tmp_path."""
    wrong = "sk-wrong-" + "7" * 24
    monkeypatch.setenv("MENS_TEST_WRONG_KEY", wrong)
    t = make_teacher(candidate(server, "good", name="wrong", api_key_env="MENS_TEST_WRONG_KEY"),
                     candidate(server, "partial", name="right"))
    replies = t.ask_many([("mens_samples", ASK)] * 3)
    assert [r.teacher for r in replies] == ["right"] * 3
    seen = [q["authorized"] for q in server.requests]   # calls in flight all met the 401
    assert seen.count(True) == 3 and 1 <= seen.count(False) <= 3
    t.ledger.write(tmp_path / "teacher_stats.json")
    (tmp_path / "replies.json").write_text(json.dumps([r.__dict__ for r in replies],
                                                      default=lambda o: o.__dict__))
    try:
        Teacher.from_config(teacher_cfg(candidate(server, "good", name="x",
                                                  api_key_env="MENS_TEST_WRONG_KEY"))
                            ).ask("mens_samples", ASK)
    except ConfigError as e:
        (tmp_path / "error.txt").write_text(e.message)
    out = capfd.readouterr()
    (tmp_path / "console.txt").write_text(out.out + out.err)
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(teacher_cfg(
        candidate(server, "good"))))
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) == 5 and "401 Unauthorized" in (tmp_path / "error.txt").read_text()
    for p in written:
        text = p.read_text()
        assert key not in text and wrong not in text, p
        assert key[-8:] not in text and wrong[-8:] not in text, p
