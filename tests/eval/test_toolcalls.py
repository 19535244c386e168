"""Tool-call scoring (mens.eval.toolcalls, issue #38): the AST match (argument-key and call order
free, BFCL's int/float rule), schema validity through jsonschema, relevance; then the rows with
intervals and n on the tiny run's base and adapter over a held-out set written here (six tools),
and `mens eval` of a base alone on a user's tool data (eval.json rows, eval.md)."""
from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from mens.eval.toolcalls import calls_match, same_value, score, turns
from toolcall_data import TOOLS, tool_records, write_jsonl


def item(reference, tools=TOOLS):
    return {"tools": tools, "reference": reference}


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


def hermes(*calls, before="") -> str:
    return before + "\n".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in calls)


def test_exact_is_an_ast_match_free_of_key_and_call_order():
    ref = [call("convert_currency", amount=5, **{"from": "EUR", "to": "USD"})]
    reordered = '<tool_call>\n{"arguments": {"to": "USD", "amount": 5.0, "from": "EUR"}, ' \
                '"name": "convert_currency"}\n</tool_call>'
    v = score(reordered, item(ref), "hermes")
    assert v["exact"] is True and v["schema_valid"] is True and v["relevance"] is None
    # values are compared as parsed JSON: a changed value, a string's case, an extra argument fail
    for wrong in ({"amount": 6, "from": "EUR", "to": "USD"},
                  {"amount": 5, "from": "eur", "to": "USD"},
                  {"amount": 5, "from": "EUR", "to": "USD", "note": "x"}):
        v = score(hermes(call("convert_currency", **wrong)), item(ref), "hermes")
        assert v["exact"] is False
    # two calls in one turn, answered in the other order: exact; one of them only: not
    two = [call("get_weather", city="Oslo"), call("read_file", path="a.md")]
    assert score(hermes(*reversed(two)), item(two), "hermes")["exact"] is True
    assert score(hermes(two[0]), item(two), "hermes")["exact"] is False
    assert score(hermes(two[0], two[0]), item(two), "hermes")["exact"] is False
    # an argument left out equals the schema's default (get_weather's units: metric)
    assert score(hermes(call("get_weather", city="Oslo", units="metric")),
                 item([call("get_weather", city="Oslo")]), "hermes")["exact"] is True
    assert score(hermes(call("get_weather", city="Oslo", units="imperial")),
                 item([call("get_weather", city="Oslo")]), "hermes")["exact"] is False


def test_value_equality_follows_bfcl_where_json_allows():
    assert same_value(1, 1.0) and same_value({"a": [1, {"b": 2}]}, {"a": [1.0, {"b": 2}]})
    assert not same_value(True, 1) and not same_value(0, False)    # a bool is never a number
    assert not same_value("1", 1) and not same_value([1, 2], [2, 1])   # lists keep their order
    assert not same_value({"a": 1}, {"a": 1, "b": None}) and same_value(None, None)
    assert calls_match([], [], {}) and not calls_match([call("x")], [], {})


def test_malformed_and_invalid_calls_are_neither_exact_nor_schema_valid():
    ref = [call("get_weather", city="Paris")]
    unclosed = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
    not_json = "<tool_call>\nget_weather(city='Paris')\n</tool_call>"
    for text in (unclosed, not_json):
        v = score(text, item(ref), "hermes")
        assert v["malformed"] and v["exact"] is False and v["schema_valid"] is False
        assert v["problems"][0].startswith("malformed call")
    # parses, but breaks the schema (minLength 2; an unknown argument): valid is False
    v = score(hermes(call("get_weather", city="P")), item(ref), "hermes")
    assert v["schema_valid"] is False and "'P' is too short" in v["problems"][0]
    v = score(hermes(call("get_weather", city="Paris", when="now")), item(ref), "hermes")
    assert v["schema_valid"] is False and "when" in v["problems"][0]
    # a tool the record does not offer; no call at all
    v = score(hermes(call("launch", target="moon")), item(ref), "hermes")
    assert v["schema_valid"] is False and "no such tool" in v["problems"][0]
    v = score("The weather is nice.", item(ref), "hermes")
    assert v["exact"] is False and v["schema_valid"] is False and v["calls"] == []
    # valid but not the reference's call: schema_valid without exact
    v = score(hermes(call("get_weather", city="Lima")), item(ref), "hermes")
    assert v["schema_valid"] is True and v["exact"] is False


def test_relevance_counts_a_call_where_none_was_needed_as_a_miss():
    none = item([])
    assert score("Hello.", none, "hermes")["relevance"] is True
    v = score(hermes(call("get_weather", city="Paris"), before="Let me check.\n"), none, "hermes")
    assert v["relevance"] is False and v["exact"] is None and v["schema_valid"] is None
    assert score("<tool_call>\n{oops", none, "hermes")["relevance"] is False
    # other families' syntaxes read through mens.data.tool_syntax
    assert score('{"name": "get_weather", "parameters": {"city": "Paris"}}',
                 item([call("get_weather", city="Paris")]), "llama3")["exact"] is True
    assert score('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]',
                 item([call("get_weather", city="Paris")]), "mistral")["exact"] is True


def test_every_assistant_turn_of_a_tool_record_is_an_item():
    from mens.data.formats import normalize

    recs = [dict(normalize(r, "messages"), id=f"r{i}") for i, r in enumerate(tool_records(5))]
    recs.append({"id": "plain", "messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "hello"}]})
    its = turns(recs)
    assert [it["id"] for it in its[:2]] == ["r0#1", "r0#3"]          # the call, then the answer
    assert its[0]["reference"][0]["arguments"] == json.loads(
        tool_records(5)[0]["messages"][1]["tool_calls"][0]["function"]["arguments"])
    assert its[1]["reference"] == [] and its[1]["head"][-1]["role"] == "tool"
    assert len(its) == 4 * 2 + 1 and all(not it["id"].startswith("plain") for it in its)


@pytest.fixture(scope="module")
def loaded(tiny_run):
    from mens.compare.core import load_models

    spec = OmegaConf.load(tiny_run / "spec.yaml")
    (b_slots, b), (_, a) = load_models(tiny_run, spec)
    yield spec, b_slots, b, a
    b_slots.close()


def test_the_rows_on_the_tiny_models_have_intervals_and_n(loaded):
    """Base and adapter of the tiny run (trained on Vox, never on tools) over 6 held-out
    records of six tools: both ~0 exact calls; the rows are the items' verdicts, paired."""
    from mens.config.compose import compose
    from mens.data.formats import normalize
    from mens.eval.toolcalls import score_set

    spec, slots, base, tuned = loaded
    recs = [dict(normalize(r, "messages"), id=f"t{i}") for i, r in enumerate(tool_records(6))]
    assert len({t["function"]["name"] for r in recs for t in r["tools"]}) >= 5
    ev = compose(["eval.max_new_tokens=32", "eval.bootstrap=200"]).eval
    out = score_set(slots, base, tuned, recs, spec, ev, spoke="mine", batch_size=4)
    rows = {r["metric"]: r for r in out["rows"]}
    assert list(rows) == ["tool_call/exact", "tool_call/schema_valid", "tool_call/relevance"]
    assert out["stats"]["syntax"] == "hermes" and out["stats"]["records"] == 6
    assert rows["tool_call/exact"]["n"] == 5 and rows["tool_call/relevance"]["n"] == 6
    for r in rows.values():
        assert r["name"] == f"mine/{r['metric']}" and r["group"] == "in_domain"
        for part in ("base", "tuned", "delta", "gain"):
            lo, hi = r[part]["ci"]
            assert lo <= r[part]["value"] <= hi
    assert rows["tool_call/exact"]["base"]["value"] == 0.0      # measured: 0 of 5
    assert len(out["items"]) == 11
    for m in ("base", "tuned"):      # each row's value is its items' verdicts
        for metric, r in rows.items():
            key = metric.split("/")[1]
            got = [it[m][key] for it in out["items"] if it[m][key] is not None]
            assert r["n"] == len(got) and r[m]["value"] == pytest.approx(sum(got) / len(got))
    assert all(isinstance(it["base"]["text"], str) for it in out["items"])


def test_the_oracle_path_prompts_with_the_records_tools(loaded):
    """The in-domain greedy answers (mens.eval.indomain) of a record with tools answer the
    prompt training rendered: the conversation AND its tools' schemas."""
    from mens.config.compose import compose
    from mens.data.formats import normalize
    from mens.eval.indomain import generate, score_set

    spec, slots, base, tuned = loaded
    recs = [dict(normalize(r, "messages"), id=f"t{i}") for i, r in enumerate(tool_records(2))]
    ev = compose(["eval.max_new_tokens=12", "eval.bootstrap=100"]).eval
    out = score_set(slots, base, tuned, recs, "tool_call_schema", spec, ev, role="spoke",
                    spoke="mine", batch_size=2, k=0, greedy=True)
    heads = [r["messages"][:1] for r in recs]      # up to the last user turn (the first)
    assert [h[-1]["role"] for h in heads] == ["user", "user"]
    texts = [slots.chat.prompt_text(h, r["tools"]) for h, r in zip(heads, recs)]
    assert all("<tools>" in t and '"name": "' in t for t in texts)
    want = generate(slots, tuned, [slots.encode(t) for t in texts], n=1, temperature=0,
                    top_p=1.0, max_new=12, seed=0, batch_size=2)
    assert [it["tuned"]["greedy"]["text"] for it in out["items"]] == [w[0] for w in want]


def test_mens_eval_of_a_base_on_tool_data_writes_the_rows(tmp_path):
    from mens.config.compose import compose
    from mens.eval.run import evaluate

    train = write_jsonl(tmp_path / "train.jsonl", tool_records(20, seed=1))
    held = write_jsonl(tmp_path / "held.jsonl", tool_records(6, seed=2))
    out = tmp_path / "ev"
    cfg = compose(["+hw=cpu", "data=file", f"data.path={train}", f"data.eval_path={held}",
                   "eval.k=0", "eval.max_new_tokens=24", "eval.collateral=false",
                   "eval.bootstrap=200", "logger=csv", f"eval.out={out}"])
    result = evaluate(cfg, out)
    ev = json.loads((out / "eval.json").read_text())
    rows = {r["name"].split("/", 1)[1]: r for r in ev["rows"]}
    assert {"tool_call/exact", "tool_call/schema_valid", "tool_call/relevance"} <= set(rows)
    assert rows["tool_call/exact"]["n"] == 5 and rows["tool_call/relevance"]["n"] == 6
    assert all("tuned" not in r and r["base"]["ci"] for r in rows.values())   # a base alone
    assert ev["tool_calls"]["turns"] == 11 and ev["tool_calls"]["syntax"] == "hermes"
    assert result["tool_calls"] == ev["tool_calls"]
    [key] = [k for k in ev["items"] if k.startswith("tool_calls/")]
    assert len(ev["items"][key]) == 11 and all("tuned" not in it for it in ev["items"][key])
    md = (out / "eval.md").read_text()
    assert "/tool_call/exact (%) | 5 |" in md and "## Tool calls" in md and "hermes" in md
