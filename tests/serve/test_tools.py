"""Tool calls served (issue #38): `tools`, `tool_choice` and `parallel_tool_calls` on
/v1/chat/completions, answered as OpenAI's `message.tool_calls` and streamed as OpenAI streams
them; a call that does not parse is content with status 200; a conversation with a tool result
is rendered token for token as training renders it.

The model is real: the tiny rung trained here for 5 epochs (30 steps) on 22 OpenAI-format
records of one tool (serve_util.train_tool_run), served by the real app under uvicorn on
127.0.0.1 and asked through the official `openai` client. The readers of the llama3 and
mistral syntaxes are checked on their text (no tiny model writes them), and their forced
openings on the real Llama 3.x / Mistral v0.3 templates (tests/data/fixtures/templates)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import jsonschema
import openai
import pytest

from serve_util import WEATHER, serving, train_tool_run

FIXTURES = Path(__file__).resolve().parent.parent / "data" / "fixtures" / "templates"
ASK = [{"role": "user", "content": "What is the weather in Sydney?"}]   # no city it trained on


# --- reading answers (no model) -----------------------------------------------------------------
ANSWERS = {   # syntax: (text the model writes, content, [(name, arguments)])
    "hermes": [
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
         None, [("get_weather", {"city": "Oslo"})]),
        ('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n'
         '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
         "Let me look.", [("get_weather", {"city": "Oslo"}), ("get_time", {})]),
        ("It is sunny.", "It is sunny.", []),
    ],
    "llama3": [
        ('{"name": "get_weather", "parameters": {"city": "Oslo"}}', None,
         [("get_weather", {"city": "Oslo"})]),
        ('<|python_tag|>{"name": "get_time", "parameters": {}}', None, [("get_time", {})]),
        ("It is {sunny}.", "It is {sunny}.", []),
    ],
    "mistral": [
        ('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Oslo"}, "id": "a1B2c3D4e"}]',
         None, [("get_weather", {"city": "Oslo"})]),
        ('[{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_time", '
         '"arguments": {}}]', None, [("get_weather", {"city": "Oslo"}), ("get_time", {})]),
        ("Sunny [see above].", "Sunny [see above].", []),
    ],
}
MALFORMED = {"hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"city": ',
             "llama3": '{"name": "get_weather", "parameters": {"city": "Oslo"',
             "mistral": '[TOOL_CALLS] [{"name": "get_weather", "arguments": "Oslo"'}


def _reader(syntax, counts=None, **kw):
    from mens.serve.tool_calls import Counts, Reader
    return Reader(syntax, counts or Counts(), **kw)


@pytest.mark.parametrize("syntax", sorted(ANSWERS))
def test_each_syntax_reads_back_as_openai_tool_calls(syntax):
    from mens.serve.tool_calls import Counts, Splitter
    counts = Counts()
    for text, content, want in ANSWERS[syntax]:
        msg, reason = _reader(syntax, counts).message(text, "stop")
        assert msg["content"] == content, (syntax, text, msg)
        got = msg.get("tool_calls", [])
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got] \
            == want
        assert reason == ("tool_calls" if want else "stop")
        for c in got:   # OpenAI's shape: arguments a JSON string, fresh ids
            assert c["type"] == "function" and isinstance(c["function"]["arguments"], str)
            assert re.fullmatch(r"[A-Za-z0-9]{9}" if syntax == "mistral" else
                                r"call_[A-Za-z0-9]{24}", c["id"]), c["id"]
        assert len({c["id"] for c in got}) == len(got)
        # streamed in any pieces: the content sent along the way starts the final content, and
        # the rest and the calls come at the end — the same answer
        for size in (1, 3, 7, len(text)):
            split = Splitter(_reader(syntax, counts))
            sent = "".join(split.feed(text[i:i + size]) for i in range(0, len(text), size))
            rest, calls, r2 = split.finish(text, "stop")
            assert sent + rest == (content or "") and r2 == reason
            assert [c["function"] for c in calls] == [c["function"] for c in got]
    # a call that does not parse: the whole text as content, the model's own finish_reason
    msg, reason = _reader(syntax, counts).message(MALFORMED[syntax], "length")
    assert msg == {"role": "assistant", "content": MALFORMED[syntax]} and reason == "length"
    assert counts.state()["malformed"] == 1
    # prose that streams: everything before a possible call is sent as it comes
    split = Splitter(_reader(syntax))
    if syntax != "llama3":
        assert split.feed("Checking the weather ") == "Checking the weather"
        assert split.feed("now.\n" + {"hermes": "<tool", "mistral": "[TOOL_C"}[syntax]) == " now."
    else:   # a llama3 call is the whole answer: prose can never become one
        assert split.feed("Checking ") == "Checking "


def test_choices_that_the_answer_does_not_meet_come_back_as_content():
    from mens.serve.tool_calls import Counts
    counts = Counts()
    two = ANSWERS["hermes"][1][0]
    # parallel_tool_calls=false: the first call only (as vLLM), the other counted
    msg, _ = _reader("hermes", counts, parallel=False).message(two, "stop")
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["get_weather"]
    # a named function the model did not call, or `required` without a call: content
    msg, reason = _reader("hermes", counts, name="get_time").message(
        ANSWERS["hermes"][0][0], "stop")
    assert msg == {"role": "assistant", "content": ANSWERS["hermes"][0][0]} and reason == "stop"
    msg, _ = _reader("hermes", counts, required=True).message("No.", "stop")
    assert msg["content"] == "No." and "tool_calls" not in msg
    assert counts.state() == {"answers_with_calls": 1, "calls": 1, "malformed": 0,
                              "required_unmet": 2, "parallel_dropped": 1}


# --- other families' templates: rendering, forced openings, refusals (no model generates) ------
FAMILY = {   # template file: (special tokens, variables, syntax, the call's opening it writes)
    "llama3.jinja": (["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                      "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"],
                     {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, "llama3",
                     '{"name": "get_weather", "parameters": '),
    "mistral.jinja": (["<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                       "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"],
                      {"bos_token": "<s>", "eos_token": "</s>"}, "mistral",
                      '[TOOL_CALLS] [{"name": "get_weather", "arguments": '),
    "qwen2_5.jinja": (["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>",
                       "</tool_call>"], {"eos_token": "<|im_end|>"}, "hermes",
                      '<tool_call>\n{"name": "get_weather", "arguments": '),
}
CLOSE = {"llama3": '{"city": "Oslo"}}', "mistral": '{"city": "Oslo"}}]',
         "hermes": '{"city": "Oslo"}}\n</tool_call>'}


@pytest.fixture(scope="module")
def bare():
    """Real Slots on the tiny base (no adapter), its encoder swapped per test for another
    family's template over the same tokenizer."""
    from mens.config.compose import compose
    from mens.serve.slots import Slots

    slots = Slots(compose(["+hw=cpu"]).rung, [], device="cpu")
    yield slots
    slots.close()


def _use(slots, name, tool_format="native"):
    """name: a fixture template, or `plain-chatml` (ChatML without tools: families_util)."""
    from families_util import CHATML

    from mens.data.encoder import RunEncoder
    from mens.data.template import ChatTemplate
    tokens, variables = FAMILY.get(name, (["<|im_start|>", "<|im_end|>"], {}))[:2]
    source = CHATML if name == "plain-chatml" else (FIXTURES / name).read_text()
    t = ChatTemplate(source, variables, tokens, name, tool_format)
    slots.chat = RunEncoder(t, slots.request_tokenizer, {"enable_thinking": False}, name)


def _request(**kw):
    from mens.serve.requests import ChatRequest
    return ChatRequest.model_validate({"model": "base", "messages": ASK, "tools": [WEATHER], **kw})


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_required_and_named_force_the_templates_own_opening(bare, name):
    from mens.serve import chat
    from mens.serve.tool_calls import Counts
    _use(bare, name)
    slot, (_, _, syntax, opening) = bare.slots["base"], FAMILY[name]
    plain = chat.build(bare, slot, _request(), Counts())
    assert plain.forced == 0 and plain.reader.syntax == syntax
    assert plain.ids == bare.encode(bare.chat.prompt_text(ASK, [WEATHER]))
    for choice, least in (("required", opening[:opening.index('"name"')]),
                          ({"type": "function", "function": {"name": "get_weather"}},
                           opening[:opening.index('get_weather') + len("get_weather")])):
        p = chat.build(bare, slot, _request(tool_choice=choice), Counts())
        assert p.ids[:len(plain.ids)] == plain.ids and p.forced == len(p.ids) - len(plain.ids)
        text = bare.tokenizer.decode(p.ids[len(plain.ids):])
        # the template's own opening, cut at a token boundary, at least up to the name
        assert opening.startswith(text) and text.startswith(least), (name, choice, text)
        # the model writes the rest: the reader takes the forced text back as part of the answer
        msg, reason = p.reader.message(opening + CLOSE[syntax], "stop")
        assert reason == "tool_calls", (name, text + rest)
        assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"city": "Oslo"}


def test_a_template_without_tools_is_a_400_unless_the_run_used_hermes(bare):
    from mens.serve import chat
    from mens.serve.tool_calls import Counts
    _use(bare, "plain-chatml")
    with pytest.raises(chat.ChatError) as e:
        chat.build(bare, bare.slots["base"], _request(), Counts())
    assert e.value.param == "tools" and "cannot render tools" in e.value.message
    assert "data.tool_format=hermes" in e.value.message
    _use(bare, "plain-chatml", "hermes")   # what a run trained with data.tool_format=hermes reads
    p = chat.build(bare, bare.slots["base"], _request(), Counts())
    assert p.reader.syntax == "hermes"
    assert "<tools>" in bare.tokenizer.decode(p.ids) and '"get_weather"' in \
        bare.tokenizer.decode(p.ids)
    bare.chat = None   # a base with no chat template at all (served as plain ChatML)
    for req, param in ((_request(), "tools"), (_request(tools=None, messages=CONVERSATION),
                                                "messages")):
        with pytest.raises(chat.ChatError) as e:
            chat.build(bare, bare.slots["base"], req, Counts())
        assert e.value.param == param and "no chat template" in e.value.message


# --- the real model, served -----------------------------------------------------------------
@pytest.fixture(scope="module")
def tool_run(tmp_path_factory):
    return train_tool_run(tmp_path_factory.mktemp("tools"))


@pytest.fixture(scope="module")
def served(tool_run):
    """(url, Slots) of base + the tool run, served in this process."""
    from mens.run.rundir import RunDir
    from mens.serve.openai_api import build_app
    from mens.serve.slots import Slots, Source

    slots = Slots(RunDir(tool_run).read_spec()["rung"], [Source.parse(str(tool_run))],
                  device="cpu")
    try:
        with serving(build_app(slots)) as url:
            yield url, slots
    finally:
        slots.close()


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=f"{served[0]}/v1", api_key="none", max_retries=0, timeout=300)


def _check_call(call, syntax_id=r"call_[A-Za-z0-9]{24}"):
    assert re.fullmatch(syntax_id, call.id) and call.type == "function"
    assert call.function.name == "get_weather" and isinstance(call.function.arguments, str)
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])


def test_the_official_client_gets_tool_calls_streamed_or_not(client, tool_run):
    kw = dict(model=tool_run.name, messages=ASK, tools=[WEATHER], temperature=0, max_tokens=48)
    for extra in ({}, {"tool_choice": "auto"}, {"tool_choice": "required"},
                  {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
                  {"parallel_tool_calls": False}):
        r = client.chat.completions.create(**kw, **extra)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", (extra, choice)
        assert choice.message.content is None
        (call,) = choice.message.tool_calls
        _check_call(call)
    # streamed, chunk by chunk: id, type and name first (arguments ""), then the arguments
    chunks = [c for c in client.chat.completions.create(stream=True, **kw) if c.choices]
    deltas = [c.choices[0].delta for c in chunks]
    assert deltas[0].role == "assistant" and deltas[0].content is None
    parts = [d.tool_calls[0] for d in deltas if d.tool_calls]
    assert len(parts) == 2 and parts[0].index == parts[1].index == 0
    assert (parts[0].function.name, parts[0].function.arguments, parts[0].type) == \
        ("get_weather", "", "function") and parts[0].id.startswith("call_")
    assert parts[1].id is None and parts[1].function.name is None
    assert parts[1].function.arguments == call.function.arguments   # greedy: the same call
    assert [c.choices[0].finish_reason for c in chunks][-1] == "tool_calls"
    assert not any(d.content for d in deltas)
    # the client's own accumulation of the stream (ChatCompletionStreamState)
    with client.chat.completions.stream(**kw) as s:
        final = s.get_final_completion()
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.choices[0].message.content is None
    (acc,) = final.choices[0].message.tool_calls
    _check_call(acc)
    assert acc.function.arguments == call.function.arguments
    # an agent loop sends the client's own message objects back, each with the tool's result
    # (the accumulated one carries the stream's `index`): both are served
    for held in (r.choices[0].message, final.choices[0].message):
        result = {"role": "tool", "tool_call_id": held.tool_calls[0].id, "content": "clear"}
        more = client.chat.completions.create(**{**kw, "messages": [*ASK, held, result]})
        assert more.choices[0].finish_reason in ("tool_calls", "stop", "length")


def test_a_malformed_call_from_the_model_is_content_with_200(client, served):
    # the untuned base, made to open a call (tool_choice names it): it cannot finish one
    kw = dict(model="base", messages=ASK, tools=[WEATHER], temperature=0, max_tokens=24,
              tool_choice={"type": "function", "function": {"name": "get_weather"}})
    before = httpx.get(f"{served[0]}/health").json()["tool_calls"]
    r = client.chat.completions.create(**kw)
    text = r.choices[0].message.content
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason == "length"
    assert text.startswith('<tool_call>\n{"name": "get_weather"'), text   # the forced opening
    chunks = [c for c in client.chat.completions.create(stream=True, **kw) if c.choices]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text
    assert not any(c.choices[0].delta.tool_calls for c in chunks)
    after = httpx.get(f"{served[0]}/health").json()["tool_calls"]
    assert after["malformed"] == before["malformed"] + 2
    assert after["required_unmet"] == before["required_unmet"] + 2
    # tool_choice none: the schemas are not shown and nothing is parsed
    plain = client.chat.completions.create(model="base", messages=ASK, temperature=0,
                                           max_tokens=4)
    none = client.chat.completions.create(model="base", messages=ASK, tools=[WEATHER],
                                          tool_choice="none", temperature=0, max_tokens=4)
    assert none.usage.prompt_tokens == plain.usage.prompt_tokens
    assert none.choices[0].message.content == plain.choices[0].message.content


CONVERSATION = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_7", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_7", "content": "{\"sky\": \"clear\", \"c\": 21}"},
]


def test_a_tool_result_is_rendered_as_training_renders_it(served, client, tool_run):
    from mens.data.formats import normalize
    from mens.serve import chat
    from mens.serve.tool_calls import Counts

    url, slots = served
    record = normalize({"tools": [WEATHER], "messages": [
        *CONVERSATION, {"role": "assistant", "content": "Clear and 21 degrees in Paris."}]},
        "messages")
    ids, labels = slots.chat.encode(record["messages"], tools=record["tools"])
    first = max(i for i, v in enumerate(labels) if v != -100 and labels[i - 1] == -100)
    want = ids[:first]   # the training tokens before the final answer: the served prompt
    got = chat.build(slots, slots.slots[tool_run.name], _request(model=tool_run.name,
                                                                 messages=CONVERSATION), Counts())
    assert got.ids == want
    assert "<tool_response>" not in slots.tokenizer.decode(want)   # ChatML's own tool turn
    r = client.chat.completions.create(model=tool_run.name, messages=CONVERSATION,
                                       tools=[WEATHER], temperature=0, max_tokens=8)
    assert r.usage.prompt_tokens == len(want)


def test_bad_tool_requests_are_400s_naming_the_field(served, tool_run):
    url = f"{served[0]}/v1/chat/completions"
    call = CONVERSATION[1]

    def bad(messages=CONVERSATION, **kw):
        body = {"model": tool_run.name, "messages": messages, "tools": [WEATHER],
                "max_tokens": 2, **kw}
        r = httpx.post(url, json=body, timeout=60)
        assert r.status_code == 400, (kw, r.text)
        s = httpx.post(url, json={**body, "stream": True}, timeout=60)
        assert s.status_code == 400
        return r.json()["error"]

    not_json = {**call, "tool_calls": [{**call["tool_calls"][0], "function": {
        "name": "get_weather", "arguments": "{city: Paris"}}]}
    err = bad([CONVERSATION[0], not_json, CONVERSATION[2]])
    assert err["param"] == "messages[1].tool_calls[0].function.arguments", err
    assert "not valid JSON" in err["message"] and err["type"] == "invalid_request_error"
    err = bad([CONVERSATION[0], call, {**CONVERSATION[2], "tool_call_id": "call_8"}])
    assert err["param"] == "messages[2]" and "answers no call" in err["message"]
    err = bad([{"role": "user", "content": None}])
    assert err["param"] == "messages[0].content"
    assert bad(tools=[{"type": "function", "function": {"description": "x"}}])["param"] == \
        "tools[0].function.name"
    assert bad(tools=None, tool_choice="required")["param"] == "tool_choice"
    assert bad(tool_choice={"type": "function", "function": {"name": "nope"}})["param"] == \
        "tool_choice"
    assert bad(parallel_tool_calls="no")["param"] == "parallel_tool_calls"
    # the server keeps serving
    assert httpx.get(f"{served[0]}/health").json()["status"] == "ok"
