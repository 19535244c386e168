"""Tool-call scoring (mens.eval.toolcalls, issue #38): the AST match (argument-key and call order
free, BFCL's int/float rule), schema validity by the admission oracle (tool_call_schema, in its
sandboxed child), relevance; then the rows with intervals and n on the tiny run's base and
adapter over a held-out set of six tools written here (tests/tooldata.py), and `mens eval` of a
base alone on a user's tool data (eval.json rows, eval.md)."""
from __future__ import annotations

import json
import random

import pytest
from omegaconf import OmegaConf

from mens.eval.toolcalls import calls_match, same_value, score_all, turns
from tooldata import TOOLS, record, write

HEAD = [{"role": "user", "content": "please"}]
# get_weather with a default for units (tooldata's requires it): absent = default
DEFAULTED = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "units": {
        "type": "string", "enum": ["metric", "imperial"], "default": "metric"}},
    "required": ["city"], "additionalProperties": False}}}]


def item(reference, tools=TOOLS):
    return {"tools": tools, "reference": reference, "head": HEAD}


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


def hermes(*calls, before="") -> str:
    return before + "\n".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in calls)


def records(n: int, seed: int = 0) -> list[dict]:
    from mens.data.formats import normalize

    r = random.Random(seed)
    return [dict(normalize(record(r, i), "messages"), id=f"t{i}") for i in range(n)]


def test_exact_is_an_ast_match_free_of_key_and_call_order():
    ref = [call("convert_currency", amount=5, source="EUR", target="USD")]
    reordered = '<tool_call>\n{"arguments": {"target": "USD", "amount": 5.0, "source": "EUR"}, ' \
                '"name": "convert_currency"}\n</tool_call>'
    two = [call("get_weather", city="Oslo", units="metric"), call("get_time", city="Oslo")]
    cases = [  # (answer, item, exact?)
        (reordered, item(ref), True),
        # values compared as parsed JSON: a changed value, a string's case, an extra argument
        (hermes(call("convert_currency", amount=6, source="EUR", target="USD")), item(ref), False),
        (hermes(call("convert_currency", amount=5, source="eur", target="USD")), item(ref), False),
        (hermes(call("convert_currency", amount=5, source="EUR", target="USD", note="x")),
         item(ref), False),
        # two calls in one turn, answered in the other order: exact; one of them, or one twice: not
        (hermes(*reversed(two)), item(two), True),
        (hermes(two[0]), item(two), False),
        (hermes(two[0], two[0]), item(two), False),
        # an argument left out equals the schema's default, and only the default
        (hermes(call("get_weather", city="Oslo", units="metric")),
         item([call("get_weather", city="Oslo")], DEFAULTED), True),
        (hermes(call("get_weather", city="Oslo")),
         item([call("get_weather", city="Oslo", units="metric")], DEFAULTED), True),
        (hermes(call("get_weather", city="Oslo", units="imperial")),
         item([call("get_weather", city="Oslo")], DEFAULTED), False),
    ]
    got = score_all([(it, text) for text, it, _ in cases], "hermes")
    assert [v["exact"] for v in got] == [want for *_, want in cases]
    assert got[0]["schema_valid"] is True and got[0]["relevance"] is None
    assert got[3]["schema_valid"] is False and "note" in got[3]["problems"][0]


def test_value_equality_follows_bfcl_where_json_allows():
    assert same_value(1, 1.0) and same_value({"a": [1, {"b": 2}]}, {"a": [1.0, {"b": 2}]})
    assert not same_value(True, 1) and not same_value(0, False)    # a bool is never a number
    assert not same_value("1", 1) and not same_value([1, 2], [2, 1])   # lists keep their order
    assert not same_value({"a": 1}, {"a": 1, "b": None}) and same_value(None, None)
    assert calls_match([], [], {}) and not calls_match([call("x")], [], {})


def test_malformed_and_invalid_calls_are_neither_exact_nor_schema_valid():
    ref = [call("get_weather", city="Paris", units="metric")]
    answers = [
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "units": "metric"}}',
        "<tool_call>\nget_weather(city='Paris')\n</tool_call>",             # not JSON
        hermes(call("get_weather", city="Paris", units="kelvin")),           # breaks the enum
        hermes(call("get_weather", city="Paris", units="metric", when="now")),   # unknown arg
        hermes(call("launch", target="moon")),                               # no such tool
        "The weather is nice.",                                              # no call at all
        hermes(call("get_weather", city="Lima", units="metric")),            # valid, not exact
    ]
    got = score_all([(item(ref), a) for a in answers], "hermes")
    assert [v["exact"] for v in got] == [False] * 7
    assert [v["schema_valid"] for v in got] == [False] * 6 + [True]
    assert got[0]["malformed"] and got[1]["malformed"] and not got[2]["malformed"]
    assert "not closed" in got[0]["problems"][0]
    assert "'kelvin' is not one of" in got[2]["problems"][0]
    assert "when" in got[3]["problems"][0] and "no such tool" in got[4]["problems"][0]
    assert "no tool call in the answer" in got[5]["problems"][0] and got[5]["calls"] == []


def test_relevance_counts_a_call_where_none_was_needed_as_a_miss():
    none = item([])
    got = score_all([(none, "Hello."),
                     (none, hermes(call("get_time", city="Oslo"), before="Let me check.\n")),
                     (none, "<tool_call>\n{oops")], "hermes")
    assert [v["relevance"] for v in got] == [True, False, False]
    assert all(v["exact"] is None and v["schema_valid"] is None for v in got)
    # other families' syntaxes, read through mens.data.tool_syntax here and in the oracle's child
    ref = [call("get_time", city="Paris")]
    got = score_all([(item(ref), '{"name": "get_time", "parameters": {"city": "Paris"}}')],
                    "llama3") + \
        score_all([(item(ref), '[TOOL_CALLS] [{"name": "get_time", "arguments": '
                               '{"city": "Paris"}}]')], "mistral")
    assert [(v["exact"], v["schema_valid"]) for v in got] == [(True, True), (True, True)]


def test_every_assistant_turn_of_a_tool_record_is_an_item():
    recs = records(8)
    recs.append({"id": "plain", "messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "hello"}]})
    its = turns(recs)
    calling = [r for r in recs[:8] if len(r["messages"]) == 4]
    assert len(its) == 2 * len(calling) + (8 - len(calling)) and 0 < len(calling) < 8
    first = next(it for it in its if it["reference"])
    rec = next(r for r in recs if r["id"] == first["record"])
    assert first["id"] == f"{rec['id']}#1" and first["reference"][0]["arguments"] == \
        rec["messages"][1]["tool_calls"][0]["function"]["arguments"]
    after = next(it for it in its if it["id"] == f"{rec['id']}#3")
    assert after["reference"] == [] and after["head"][-1]["role"] == "tool"
    assert not any(it["id"].startswith("plain") for it in its)


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
    from mens.eval.toolcalls import score_set

    spec, slots, base, tuned = loaded
    recs = records(6, seed=0)
    calling = sum(len(r["messages"]) == 4 for r in recs)
    assert len({t["function"]["name"] for r in recs for t in r["tools"]}) == 6 and calling == 5
    ev = compose(["eval.max_new_tokens=32", "eval.bootstrap=200"]).eval
    out = score_set(slots, base, tuned, recs, spec, ev, spoke="mine", batch_size=4)
    rows = {r["metric"]: r for r in out["rows"]}
    assert list(rows) == ["tool_call/exact", "tool_call/schema_valid", "tool_call/relevance"]
    assert out["stats"]["syntax"] == "hermes" and out["stats"]["records"] == 6
    assert rows["tool_call/exact"]["n"] == rows["tool_call/schema_valid"]["n"] == 5
    assert rows["tool_call/relevance"]["n"] == 6      # 5 answers after a result + 1 chat
    assert rows["tool_call/schema_valid"]["unverified"]["prompts_left_out"] == 0
    for r in rows.values():
        assert r["name"] == f"mine/{r['metric']}" and r["group"] == "in_domain"
        for part in ("base", "tuned"):
            lo, hi = r[part]["ci"]
            assert lo <= r[part]["value"] <= hi
        # fewer than 20 turns: the exact small-n intervals of mens.eval.stats, n carried along
        assert r["gain"]["n"] == r["n"] and r["gain"]["method"] == "exact"
    assert rows["tool_call/exact"]["base"]["value"] == 0.0      # measured: 0 of 5
    assert rows["tool_call/schema_valid"]["base"]["value"] == 0.0
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
    from mens.eval.indomain import generate, score_set

    spec, slots, base, tuned = loaded
    recs = records(2)
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

    train, held = tmp_path / "train.jsonl", tmp_path / "held.jsonl"
    write(train, 20, seed=1)
    write(held, 6, seed=0)
    out = tmp_path / "ev"
    cfg = compose(["+hw=cpu", "data=file", f"data.path={train}", f"data.eval_path={held}",
                   "eval.k=0", "eval.max_new_tokens=24", "eval.collateral=false",
                   "eval.bootstrap=200", "logger=csv", f"eval.out={out}"])
    result = evaluate(cfg, out)
    ev = json.loads((out / "eval.json").read_text())
    rows = {r["name"].split("/", 1)[1]: r for r in ev["rows"]}
    assert {"tool_call/exact", "tool_call/schema_valid", "tool_call/relevance"} <= set(rows)
    t = ev["tool_calls"]
    assert t["records"] == rows["loss"]["n"] == 6 and t["syntax"] == "hermes"
    assert rows["tool_call/exact"]["n"] == t["call_turns"] == 5
    assert rows["tool_call/relevance"]["n"] == t["no_call_turns"] == 6
    assert all("tuned" not in r and r["base"]["ci"] for r in rows.values())   # a base alone
    assert result["tool_calls"] == t and "malformed_tuned" not in t
    [key] = [k for k in ev["items"] if k.startswith("tool_calls/")]
    assert len(ev["items"][key]) == 11 and all("tuned" not in it for it in ev["items"][key])
    md = (out / "eval.md").read_text()
    assert "/tool_call/exact (%) | 5 |" in md and "## Tool calls" in md and "hermes" in md
