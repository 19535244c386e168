"""One teacher endpoint through the official openai client, against the real replay server
(tests/teacher_server.py): structured output, bad output counted and never fatal, the samples
of a partly bad reply kept, 429 retried, a 400 on response_format answered by the schema in the
prompt, the concurrency limit, usage and cost."""
from __future__ import annotations

import json
import time

import pytest

from synth.teacher.teacher_util import candidate
from mens.synth.teacher import SCHEMAS, check
from mens.synth.teacher.client import with_schema

ASK = [{"role": "system", "content": "You write Vox training samples."},
       {"role": "user", "content": "Give 2 samples for the leaf `printing`."}]


def test_well_formed_reply_with_response_format(server, make_teacher):
    t = make_teacher(candidate(server, "good"))
    r = t.ask("mens_samples", ASK)
    assert r.ok and r.mode == "json_schema" and r.teacher == "good" and r.model == "good"
    assert r.data == {"samples": [{"prompt": "Print 1 in Vox.", "response": "print 1"},
                                  {"prompt": "Add 2 and 3.", "response": "print 2 + 3"}]}
    assert r.problems == [] and r.dropped == []
    sent = server.requests[-1]["body"]
    assert sent["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "mens_samples", "schema": SCHEMAS["mens_samples"], "strict": True}}
    assert sent["messages"] == ASK                     # the schema is not in the prompt
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (1000, 500)
    assert r.usage.cost_usd is None                    # no price: cost unknown, said
    s = t.ledger.as_dict()["teachers"]["good"]
    assert (s["calls"], s["ok"], s["samples_kept"], s["cost_usd"]) == (1, 1, 2, None)
    assert "no price for this teacher: cost_usd is null" in s["notes"]
    for name, want in (("mens_subtopics", {"subtopics": ["loops", "closures", "error handling"]}),
                       ("mens_repair", {"response": 'fn main() { println!("fixed"); }'})):
        r = t.ask(name, [{"role": "user", "content": f"{name.split('_')[1].upper()}: go"}])
        assert r.ok and r.data == want, r.problems
        assert server.requests[-1]["body"]["response_format"]["json_schema"]["name"] == name


def test_cost_from_the_tier_price(server, make_teacher):
    t = make_teacher(candidate(server, "good", price_in_per_mtok=0.4, price_out_per_mtok=1.6,
                               price_date="2026-03-21", price_source="https://example/p"))
    r = t.ask("mens_samples", ASK)
    assert r.usage.cost_usd == pytest.approx((1000 * 0.4 + 500 * 1.6) / 1e6)
    d = t.ledger.as_dict()
    assert d["teachers"]["good"]["cost_usd"] == pytest.approx(0.0012)
    assert d["teachers"]["good"]["price_source"] == "https://example/p"
    assert d["totals"]["cost_usd"] == pytest.approx(0.0012)


def test_malformed_json_is_counted_not_fatal(server, make_teacher):
    t = make_teacher(candidate(server, "malformed"))
    r = t.ask("mens_samples", ASK)
    assert not r.ok and r.data is None
    assert r.problems and "not JSON" in r.problems[0]
    assert len(server.requests) == 1                   # structured mode: no second ask
    s = t.ledger.as_dict()["teachers"]["malformed"]
    assert (s["calls"], s["ok"], s["invalid_json"], s["fallthroughs"]) == (1, 0, 1, 0)


def test_valid_samples_of_a_partly_bad_reply_are_kept(server, make_teacher):
    t = make_teacher(candidate(server, "partial"))
    r = t.ask("mens_samples", ASK)
    assert r.ok
    assert [s["prompt"] for s in r.data["samples"]] == ["kept one", "kept two"]
    assert [d["item"] for d in r.dropped] == [
        {"prompt": "", "response": "an empty prompt"}, {"prompt": "no response"},
        {"prompt": "an extra key", "response": "r", "rating": 5}, "not an object"]
    errors = [d["error"] for d in r.dropped]
    assert errors[0] == "samples[1].prompt: is empty"
    assert "'response' is a required property" in errors[1]
    assert "'rating' was unexpected" in errors[2] and "not of type 'object'" in errors[3]
    s = t.ledger.as_dict()["teachers"]["partial"]
    assert (s["ok"], s["schema_violations"], s["samples_kept"], s["samples_dropped"]) == \
        (1, 1, 2, 4)


def test_429_is_retried_with_backoff(server, make_teacher):
    t = make_teacher(candidate(server, "flaky"))
    r = t.ask("mens_samples", ASK)
    assert r.ok and r.data["samples"][0]["prompt"] == "after a 429"
    assert len(server.requests) == 2
    s = t.ledger.as_dict()["teachers"]["flaky"]
    assert (s["retries"], s["calls"], s["fallthroughs"]) == (1, 1, 0)


def test_400_on_response_format_puts_the_schema_in_the_prompt(server, make_teacher, capsys):
    t = make_teacher(candidate(server, "no_rf"))
    r = t.ask("mens_samples", ASK)
    # 1: response_format → 400; 2: prompt mode → prose (invalid); 3: the retry with the error
    bodies = [q["body"] for q in server.requests]
    assert len(bodies) == 3
    assert "response_format" in bodies[0] and "response_format" not in bodies[1]
    system = bodies[1]["messages"][0]
    assert system["role"] == "system" and system["content"].startswith(ASK[0]["content"])
    assert json.dumps(SCHEMAS["mens_samples"], separators=(",", ":")) in system["content"]
    assert bodies[2]["messages"][:-2] == bodies[1]["messages"]
    assert bodies[2]["messages"][-2] == {"role": "assistant",
                                        "content": "Sure! Here are some great samples for you."}
    assert bodies[2]["messages"][-1]["content"].startswith("That reply was not valid: the "
                                                           "reply is not JSON")
    assert r.ok and r.mode == "prompt" and r.data == {"samples": [{"prompt": "fenced",
                                                                  "response": "ok"}]}
    s = t.ledger.as_dict()["teachers"]["no_rf"]
    assert (s["calls"], s["ok"], s["invalid_json"], s["mode"]) == (2, 1, 1, "prompt")
    assert any("refused response_format" in n for n in s["notes"])
    assert "mens: note: teacher no_rf refused response_format" in capsys.readouterr().err
    r = t.ask("mens_samples", ASK)                    # remembered: straight to the prompt
    assert r.ok and "response_format" not in server.requests[-1]["body"]
    assert len(server.requests) == 4


def test_prompt_mode_garbage_gets_one_retry_then_counts(server, make_teacher):
    t = make_teacher(candidate(server, "no_rf_garbage", capabilities=[]))
    r = t.ask("mens_subtopics", ASK)
    assert not r.ok and len(server.requests) == 2      # capability off: no 400 round trip
    assert all("response_format" not in q["body"] for q in server.requests)
    s = t.ledger.as_dict()["teachers"]["no_rf_garbage"]
    assert (s["calls"], s["ok"], s["invalid_json"]) == (2, 0, 2)


def test_batch_concurrency_limit_order_and_garbage(server, make_teacher):
    t = make_teacher(candidate(server, "slow"), concurrency=3)
    seen = []
    start = time.monotonic()
    replies = t.ask_many([("mens_samples", ASK)] * 9, on_reply=lambda i, r: seen.append(i))
    took = time.monotonic() - start
    assert [r.ok for r in replies] == [True] * 9 and sorted(seen) == list(range(9))
    assert server.max_in_flight == 3                   # never more than teacher.concurrency
    assert took < 9 * 0.25 * 0.75                      # and really in parallel
    bad = make_teacher(candidate(server, "malformed"), concurrency=4)
    replies = bad.ask_many([("mens_samples", ASK, {"seed": i}) for i in range(6)])
    assert [r.ok for r in replies] == [False] * 6      # counted, the batch finished
    assert bad.ledger.as_dict()["teachers"]["malformed"]["invalid_json"] == 6
    assert server.requests[-1]["body"]["seed"] in range(6)


def test_ledger_file(server, make_teacher, tmp_path):
    t = make_teacher(candidate(server, "partial"), candidate(server, "good", name="second"))
    t.ask("mens_samples", ASK)
    path = t.ledger.write(tmp_path / "teacher_stats.json")
    d = json.loads(path.read_text())
    assert set(d) == {"teachers", "fallthroughs", "totals"}
    fields = {"calls", "ok", "invalid_json", "schema_violations", "samples_kept",
              "samples_dropped", "retries", "fallthroughs", "prompt_tokens",
              "completion_tokens", "cost_usd", "model", "base_url", "price_in_per_mtok",
              "price_out_per_mtok", "price_date", "price_source", "mode", "notes"}
    assert set(d["teachers"]["partial"]) == fields and d["teachers"]["second"]["calls"] == 0
    assert d["totals"]["samples_kept"] == 2 and d["totals"]["cost_usd"] is None
    assert not list(tmp_path.glob(".*tmp*"))          # written by temp + rename


def test_check_and_schema_instruction_without_a_server():
    assert check("mens_subtopics", '```json\n{"subtopics": ["a"]}\n```').data == {
        "subtopics": ["a"]}
    assert check("mens_repair", '{"response": "  "}').violations == ["response: is empty"]
    assert check("mens_samples", '{"samples": [{"prompt": "", "response": ""}]}').data is None
    assert check("mens_samples", '{"samples": []}').data == {"samples": []}
    assert check("mens_samples", "[1, 2]").violations
    with pytest.raises(ValueError, match="mens_subtopics, mens_samples, mens_repair"):
        check("mens_other", "{}")
    msgs = with_schema([{"role": "user", "content": "hi"}], "mens_repair")
    assert msgs[0]["role"] == "system" and '"required":["response"]' in msgs[0]["content"]
