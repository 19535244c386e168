"""A user's tool-calling data through `data=file` (issue #38): the issue's own record inspected
(the call is supervised, not erased), `data.tools` for records that list none, bad tool input as
exit 2 naming file:line and field, `data.on_bad=skip` dropping and counting, and the counts of
calls read / rendered / supervised in `mens data inspect`. All before any model loads."""
from __future__ import annotations

import json

import pytest
from tooldata import TOOLS, write
from userdata import write_jsonl

from mens.data.sources import load_data

BASE = {"source": "file", "eval_fraction": 0.1, "decontam_n": 13, "decontam_threshold": 0.5}
# the issue's record: a tools list, a call with content null, a tool result, a final answer
ISSUE = {"tools": [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}],
    "messages": [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 18}"},
        {"role": "assistant", "content": "It is 18 °C in Paris."}]}


def test_the_issue_record_is_inspected_with_its_call_supervised(tmp_path, monkeypatch, capsys):
    from mens.cli.data import main

    chat = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    write_jsonl(tmp_path / "t.jsonl", [ISSUE, chat])   # one of the two is held out
    monkeypatch.chdir(tmp_path)
    assert main(["inspect", "data=file", "data.path=t.jsonl"]) == 0
    out = capsys.readouterr().out
    assert ('⟦<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            '</tool_call><|im_end|>⟧') in out
    assert '"name": "get_weather", "description": "Current weather."' in out   # the schema
    assert "⟦It is 18 °C in Paris.<|im_end|>⟧" in out
    assert "⟦<|im_end|>⟧" not in out                                          # never emptied
    assert "tool calls (hermes syntax): 1 read → 1 rendered → 1 supervised" in out


def test_data_tools_gives_records_without_tools_the_shared_schemas(tmp_path):
    recs = write(tmp_path / "all.jsonl", 60, seed=3, k=6)
    for r in recs:
        del r["tools"]
    write_jsonl(tmp_path / "bare.jsonl", recs)
    (tmp_path / "tools.json").write_text(json.dumps([t["function"] for t in TOOLS]))
    ds = load_data({**BASE, "path": str(tmp_path / "bare.jsonl"),
                    "tools": str(tmp_path / "tools.json")}, "sft")
    assert all(r["tools"] == TOOLS for r in ds.train + ds.eval)   # bare schemas wrapped
    assert ds.lock[-1]["role"] == "tools" and len(ds.lock[-1]["sha256"]) == 64
    with pytest.raises(Exception, match="not in the record's `tools`"):
        load_data({**BASE, "path": str(tmp_path / "bare.jsonl")} | {
            "tools": str(_file(tmp_path / "one.json", [TOOLS[0]]))}, "sft")


def _file(path, obj):
    path.write_text(json.dumps(obj))
    return path


BAD_ARGS = {**ISSUE, "messages": [ISSUE["messages"][0], {
    "role": "assistant", "content": None,
    "tool_calls": [{"function": {"name": "get_weather", "arguments": "{city: Paris}"}}]}]}


def test_bad_tool_input_exits_2_naming_file_line_and_field(tmp_path, monkeypatch, capsys):
    from mens.cli.train import main

    write_jsonl(tmp_path / "t.jsonl", [ISSUE, ISSUE, BAD_ARGS])
    monkeypatch.chdir(tmp_path)
    assert main(["+hw=cpu", "data=file", "data.path=t.jsonl"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mens: error (exit 2): ") and "Traceback" not in err
    for w in ("t.jsonl:3", "messages[1].tool_calls[0].function.arguments", "not valid JSON",
              "data.on_bad=skip"):
        assert w in err, (w, err)


def test_on_bad_skip_drops_and_counts(tmp_path):
    recs = write(tmp_path / "ok.jsonl", 40, seed=4, k=3)
    write_jsonl(tmp_path / "mixed.jsonl", recs + [BAD_ARGS, BAD_ARGS | {"messages": [
        ISSUE["messages"][0], {"role": "tool", "content": "x"}]}])
    ds = load_data({**BASE, "path": str(tmp_path / "mixed.jsonl"), "on_bad": "skip"}, "sft")
    assert ds.stats["bad_skipped"] == 2 and ds.stats["read"] == 40
    assert ds.stats["bad_examples"][0].startswith(f"{tmp_path / 'mixed.jsonl'}:41: ")
    assert ds.stats["tool_calls_in_data"] == sum(
        len(m.get("tool_calls") or []) for r in recs for m in r["messages"])
    with pytest.raises(Exception, match="dropped every record"):
        write_jsonl(tmp_path / "bad.jsonl", [BAD_ARGS])
        load_data({**BASE, "path": str(tmp_path / "bad.jsonl"), "on_bad": "skip"}, "sft")
