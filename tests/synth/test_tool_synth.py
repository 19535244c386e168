"""`mens data synth synth.tools=FILE` (issue #38): the teacher is asked (json_schema
mens_tool_samples) for tool-using conversations over the schemas in FILE; records are written in
mens's structured form and every call is validated against its schema (jsonschema) — a sample
with an invalid call is rejected, counted and quarantined with its reasons. Against the real
OpenAI-compatible stand-in server on 127.0.0.1 (tests/teacher_server.py)."""
from __future__ import annotations

import json
import secrets

import pytest

from mens.cli.data import main
from mens.synth.dataset import read_jsonl
from teacher_server import replay_server
from tooldata import TOOLS

KEY_ENV = "MENS_TEST_TOOL_TEACHER_KEY"


def call(name, **args):
    return {"name": name, "arguments": json.dumps(args)}


GOOD = [   # a chain of two rounds, two calls in one round, a request that needs no tool
    {"prompt": "What time is it in Oslo, and how warm is it there?",
     "steps": [{"calls": [call("get_time", city="Oslo")], "results": ['{"time": "09:12"}']},
               {"calls": [call("get_weather", city="Oslo", units="metric")],
                "results": ['{"temp": 3}']}],
     "answer": "It is 09:12 in Oslo and 3 degrees."},
    {"prompt": "Weather in Rome and Lima, metric?",
     "steps": [{"calls": [call("get_weather", city="Rome", units="metric"),
                          call("get_weather", city="Lima", units="metric")],
                "results": ['{"temp": 21}', '{"temp": 19}']}],
     "answer": "Rome is 21 degrees, Lima 19."},
    {"prompt": "What does a timer do?", "steps": [],
     "answer": "It counts down and tells you when time is up."},
]
BAD = [    # each breaks one rule: the schema (type, enum, required), an unknown tool, not JSON,
           # a result missing
    {"prompt": "Timer for ten minutes.",
     "steps": [{"calls": [call("set_timer", minutes="ten", label="tea")],
                "results": ['{"ok": true}']}], "answer": "Done."},
    {"prompt": "Weather in Rome, in kelvin.",
     "steps": [{"calls": [call("get_weather", city="Rome", units="kelvin")],
                "results": ["{}"]}], "answer": "Cold."},
    {"prompt": "Email ben.", "steps": [{"calls": [call("send_email", to="ben@mail.org")],
                                        "results": ["{}"]}], "answer": "Sent."},
    {"prompt": "Launch it.", "steps": [{"calls": [call("launch_rocket", target="moon")],
                                        "results": ["{}"]}], "answer": "Launched."},
    {"prompt": "Time in Oslo.", "steps": [{"calls": [{"name": "get_time",
                                                      "arguments": "{city: Oslo}"}],
                                           "results": ["x"]}], "answer": "It is x."},
    {"prompt": "Convert 5 EUR to USD.",
     "steps": [{"calls": [call("convert_currency", amount=5, source="EUR", target="USD")],
                "results": []}], "answer": "About 5.4 USD."},
]


def scripts():
    return [{"model": "*", "match": "Expand: mcp_tool_chain",
             "replies": [{"json": {"subtopics": ["lookups", "errands"]}}]},
            {"model": "*", "match": "Topic: lookups", "replies": [{"json": {"samples": GOOD}}]},
            {"model": "*", "match": "Topic: errands", "replies": [{"json": {"samples": BAD}}]}]


@pytest.fixture
def teacher(monkeypatch):
    key = "sk-tools-" + secrets.token_hex(8)
    monkeypatch.setenv(KEY_ENV, key)
    with replay_server(scripts(), api_key=key) as srv:
        yield srv


def args(srv, out, tools_file):
    return ["teacher=endpoint", f"teacher.base_url={srv.base_url}", "teacher.model=replay",
            f"teacher.api_key_env={KEY_ENV}", "teacher.backoff_s=0.01", "teacher.max_retries=1",
            f"synth.out={out}", "spoke=mcp_tool_chain", f"synth.tools={tools_file}"]


def test_tool_synthesis_writes_structured_records_and_rejects_invalid_calls(teacher, tmp_path,
                                                                           capsys):
    tools_file = tmp_path / "tools.jsonl"
    tools_file.write_text("".join(json.dumps(t["function"]) + "\n" for t in TOOLS))  # bare form
    out = tmp_path / "ds"
    a = args(teacher, out, tools_file)
    assert main(["tree", "expand", *a, "tree.depth=1", "tree.branching=2"]) == 0
    assert main(["synth", *a, "synth.per_leaf=8"]) == 0
    assert "every tool call against the schemas of 6 tools" in capsys.readouterr().out
    asked = [r["body"] for r in teacher.requests
             if r["body"]["response_format"]["json_schema"]["name"] == "mens_tool_samples"]
    assert len(asked) == 2 and all(r["authorized"] for r in teacher.requests)
    assert all('"name": "search_flights"' in b["messages"][0]["content"] for b in asked)

    recs = read_jsonl(out / "records.jsonl")
    assert len(recs) == 3
    for r in recs:   # structured: record-level tools, calls as objects, judged by the oracles
        assert r["tools"] == TOOLS and r["verdict"] == "passed" and r["oracle"]["passed"]
        calls = [c["function"] for m in r["messages"] for c in m.get("tool_calls") or []]
        assert all(isinstance(c["arguments"], dict) for c in calls)
        assert r["oracle"]["check"] == ("transcript_structure + tool_call_schema" if calls
                                        else "transcript_structure")
    chain = next(r for r in recs if "Oslo" in r["messages"][1]["content"])
    assert [m["role"] for m in chain["messages"]] == ["system", "user", "assistant", "tool",
                                                      "assistant", "tool", "assistant"]
    assert chain["messages"][3]["tool_call_id"] == chain["messages"][2]["tool_calls"][0]["id"]
    assert chain["messages"][4]["tool_calls"][0]["function"] == {
        "name": "get_weather", "arguments": {"city": "Oslo", "units": "metric"}}

    quar = read_jsonl(out / "quarantine.jsonl")
    assert len(quar) == 6 and all(q["reason"].startswith("invalid tool call") for q in quar)
    why = {q["messages"][1]["content"]: q["reason"] for q in quar}
    assert "tool_call_schema: call 1 `set_timer` arguments $.minutes: 'ten' is not of type " \
        "'integer'" in why["Timer for ten minutes."]
    assert "'kelvin' is not one of" in why["Weather in Rome, in kelvin."]
    assert "'subject' is a required property" in why["Email ben."]
    assert "calls 'launch_rocket', which is not in the record's `tools`" in why["Launch it."]
    assert "arguments are not JSON" in why["Time in Oslo."]
    assert "1 calls but 0 results" in why["Convert 5 EUR to USD."]

    counts = json.loads((out / "stats.json").read_text())["runs"][-1]["counts"]
    assert counts["samples"] == 9 and counts["passed"] == 3 and counts["tool_calls"] == 4
    assert counts["invalid_tool_samples"] == 6 and counts["quarantined"] == 6


def test_the_records_train_as_user_data(teacher, tmp_path):
    """records.jsonl reads back through `data=file` with its calls intact, and each family's
    template renders them (the tiny rung's: Hermes <tool_call> blocks, calls supervised)."""
    from mens.data.encoder import RunEncoder
    from mens.data.sources import load_records
    from mens.resources import ASSETS

    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS))
    out = tmp_path / "ds"
    a = args(teacher, out, tools_file)
    assert main(["tree", "expand", *a, "tree.depth=1", "tree.branching=2"]) == 0
    assert main(["synth", *a]) == 0
    recs, fmt, stats, _ = load_records({"path": str(out / "records.jsonl")})
    assert fmt == "messages" and len(recs) == 3 and stats["tool_calls_in_data"] == 4
    enc = RunEncoder.load(ASSETS / "tiny")
    counted: dict = {}
    for r in recs:
        enc.encode(r["messages"], stats=counted, tools=r["tools"])
    assert counted["tool_calls_read"] == counted["tool_calls_supervised"] == 4


def test_what_it_refuses(tmp_path):
    from mens.config.compose import compose
    from mens.errors import ConfigError, DataError
    from mens.synth.synth import synth

    bad = tmp_path / "tools.json"
    bad.write_text(json.dumps([{"description": "no name"}]))
    cfg = compose(["spoke=mcp_tool_chain", f"synth.out={tmp_path / 'ds'}", f"synth.tools={bad}"])
    with pytest.raises(DataError, match="no function name"):
        synth(cfg)
    bad.write_text(json.dumps([{"name": "f", "parameters": {"type": "objekt"}}]))
    with pytest.raises(DataError, match="parameters of tool 'f'"):
        synth(cfg)
    cfg.synth.strategy = "cot_distill"
    with pytest.raises(ConfigError, match="cot_distill"):
        synth(cfg)
