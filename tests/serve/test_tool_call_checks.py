"""Served tool calls checked against the request (issue #49, item 6): a call is answered as a
call only when it names a function the request's `tools` offer and holds an arguments object
that is JSON. Anything else is the model's text, as content, counted `malformed` (/health).

The requests go through mens.serve.chat.build — the real prompt rendering on the tiny base's
tokenizer with the real Llama 3 / Qwen 2.5 templates (tests/data/fixtures/templates) — and its
Reader reads the answer a model could write; the Mistral v13 syntax is checked on its text."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from serve_util import WEATHER

FIXTURES = Path(__file__).resolve().parent.parent / "data" / "fixtures" / "templates"
ASK = [{"role": "user", "content": "What is the weather in Oslo?"}]
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time now",
    "parameters": {"type": "object", "properties": {}}}}
TEMPLATES = {   # syntax: (template file, its special tokens, its variables)
    "llama3": ("llama3.jinja", ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>",
                                "<|python_tag|>"],
               {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "hermes": ("qwen2_5.jinja", ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>",
                                 "</tool_call>"], {"eos_token": "<|im_end|>"}),
}


@pytest.fixture(scope="module")
def bare():
    from mens.config.compose import compose
    from mens.serve.slots import Slots

    slots = Slots(compose(["+hw=cpu"]).rung, [], device="cpu")
    yield slots
    slots.close()


def answer(slots, syntax: str, text: str, tools=(WEATHER,), **req):
    """(message, finish_reason, counts) of `text` as the answer to a chat request with `tools`,
    served with the family's template."""
    from mens.data.encoder import RunEncoder
    from mens.data.template import ChatTemplate
    from mens.serve import chat
    from mens.serve.requests import ChatRequest
    from mens.serve.tool_calls import Counts

    name, tokens, variables = TEMPLATES[syntax]
    t = ChatTemplate((FIXTURES / name).read_text(), variables, tokens, name, "native")
    slots.chat = RunEncoder(t, slots.request_tokenizer, {"enable_thinking": False}, name)
    counts = Counts()
    r = ChatRequest.model_validate({"model": "base", "messages": ASK, "tools": list(tools), **req})
    p = chat.build(slots, slots.slots["base"], r, counts)
    assert p.reader is not None and p.reader.syntax == syntax
    msg, reason = p.reader.message(text, "stop")
    return msg, reason, counts.state()


def test_a_json_answer_with_a_name_is_not_a_call_to_that_name(bare):
    # Llama 3's call is the whole answer as JSON: an answer that IS JSON, with a "name" but no
    # "parameters", was a call to "Alice" with {} — the answer lost
    text = '{"name": "Alice", "age": 31}'
    msg, reason, counts = answer(bare, "llama3", text)
    assert msg == {"role": "assistant", "content": text} and reason == "stop"
    assert counts["malformed"] == 1 and counts["calls"] == 0


def test_a_call_to_a_function_the_request_does_not_offer_is_content(bare):
    for syntax, text in (
            ("llama3", '{"name": "get_time", "parameters": {}}'),
            ("hermes", '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'),
            ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n'
                       '</tool_call>\n<tool_call>\n{"name": "rm_rf", "arguments": {}}\n'
                       '</tool_call>')):
        msg, reason, counts = answer(bare, syntax, text)
        assert msg == {"role": "assistant", "content": text} and reason == "stop", text
        assert counts["malformed"] == 1 and counts["answers_with_calls"] == 0
    # offered: a call (the same answer, the function now in `tools`)
    msg, reason, counts = answer(bare, "llama3", '{"name": "get_time", "parameters": {}}',
                                 tools=(WEATHER, TIME))
    assert reason == "tool_calls" and msg["tool_calls"][0]["function"]["name"] == "get_time"
    assert counts["malformed"] == 0


def test_a_named_tool_choice_keeps_its_call_when_another_rides_along(bare):
    text = ('<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\n<tool_call>\n'
            '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')
    msg, reason, counts = answer(bare, "hermes", text, tools=(WEATHER, TIME), tool_choice={
        "type": "function", "function": {"name": "get_weather"}})
    assert reason == "tool_calls" and msg["content"] is None
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in msg["tool_calls"]] == [("get_weather", {"city": "Oslo"})]
    assert counts["parallel_dropped"] == 1 and counts["required_unmet"] == 0
    # the one riding along may name anything: the named call is what was asked for
    rider = text.replace('"get_time"', '"rm_rf"')
    msg, reason, counts = answer(bare, "hermes", rider, tools=(WEATHER, TIME), tool_choice={
        "type": "function", "function": {"name": "get_weather"}})
    assert reason == "tool_calls" and [c["function"]["name"] for c in msg["tool_calls"]] \
        == ["get_weather"] and counts["parallel_dropped"] == 1


@pytest.mark.parametrize("syntax,text", [
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": NaN}}\n</tool_call>'),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": Infinity}"}\n'
               '</tool_call>'),
    ("llama3", '{"name": "get_weather", "parameters": {"city": -Infinity}}')])
def test_nan_and_infinity_arguments_are_malformed_not_passed_on(bare, syntax, text):
    msg, reason, counts = answer(bare, syntax, text)
    assert msg == {"role": "assistant", "content": text} and reason == "stop"
    assert counts["malformed"] == 1


def test_mistral_v13_call_id_is_not_part_of_the_name():
    from mens.data.tool_syntax import parse
    from mens.serve.tool_calls import Counts, Reader

    text = ('[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{"city": "Oslo"}'
            '[TOOL_CALLS]get_time[CALL_ID]Z9y8X7w6v[ARGS]{}')
    p = parse(text, "mistral")
    assert p.malformed is None and p.content == ""
    assert [(c["function"]["name"], c["function"]["arguments"], c.get("id")) for c in p.calls] \
        == [("get_weather", {"city": "Oslo"}, "a1B2c3D4e"), ("get_time", {}, "Z9y8X7w6v")]
    msg, reason = Reader("mistral", Counts()).message(text, "stop")
    assert reason == "tool_calls"
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["get_weather", "get_time"]
