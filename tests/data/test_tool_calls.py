"""Tool calls from the user's data to the rendered, labelled tokens (issue #38).

Each conversation below is read by mens (mens.data.formats: OpenAI messages with `tool_calls`
and `tools`, ShareGPT/LLaMA-Factory's function_call/observation) and rendered through the real
published templates of Qwen3, Qwen2.5, Llama 3.1/3.2/3.3 and Mistral v0.3
(tests/data/fixtures/templates): the text and the token ids must equal transformers'
`apply_chat_template(messages, tools=…)`, the labels must cover exactly each call (in the
family's own syntax) and each answer with its end-of-turn token, and no call may be lost —
calls read = rendered = supervised.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mens.data.formats import detect, normalize, tool_calls
from mens.data.pack import IGNORE
from mens.data.template import ChatTemplate
from mens.data.tool_syntax import parse, syntax_of
from mens.errors import DataError

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "mens/assets/tiny"
FIXTURES = Path(__file__).parent / "fixtures/templates"
QWEN = ({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
         "</tool_call>"])
LLAMA = ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
         ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
          "<|eom_id|>", "<|python_tag|>", "<|end_of_text|>"])
MISTRAL = ({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
           ["<s>", "</s>", "<unk>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"])
FAMILIES = {"qwen3": QWEN, "qwen2_5": QWEN, "llama3": LLAMA, "llama3_3": LLAMA,
            "mistral": MISTRAL}
EOT = {"qwen3": "<|im_end|>", "qwen2_5": "<|im_end|>", "llama3": "<|eot_id|>",
       "llama3_3": "<|eot_id|>", "mistral": "</s>"}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def call(cid, name, args):   # as OpenAI sends it: arguments a JSON string
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


# the record: tools, a call with content null, a tool result, a final answer
SINGLE = {"tools": [WEATHER], "messages": [
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": None,
     "tool_calls": [call("call00001", "get_weather", {"city": "Paris"})]},
    {"role": "tool", "tool_call_id": "call00001", "content": '{"temp_c": 18}'},
    {"role": "assistant", "content": "It is 18 °C in Paris."}]}
MULTI = {"tools": [WEATHER, TIME], "messages": [
    {"role": "user", "content": "Weather and time in Oslo?"},
    {"role": "assistant", "content": None,
     "tool_calls": [call("call00002", "get_weather", {"city": "Oslo"}),
                    call("call00003", "get_time", {"city": "Oslo"})]},
    {"role": "tool", "tool_call_id": "call00002", "content": '{"temp_c": 3}'},
    {"role": "tool", "tool_call_id": "call00003", "content": '{"time": "09:30"}'},
    {"role": "assistant", "content": "3 °C at 09:30 in Oslo."}]}
TURNS = {"tools": [WEATHER, TIME], "messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Rome?"},
    {"role": "assistant", "content": None,
     "tool_calls": [call("call00004", "get_weather", {"city": "Rome"})]},
    {"role": "tool", "tool_call_id": "call00004", "content": '{"temp_c": 25}'},
    {"role": "assistant", "content": "25 °C."},
    {"role": "user", "content": "And the time there?"},
    {"role": "assistant", "content": None,
     "tool_calls": [call("call00005", "get_time", {"city": "Rome"})]},
    {"role": "tool", "tool_call_id": "call00005", "content": '{"time": "14:05"}'},
    {"role": "assistant", "content": "14:05."}]}
# LLaMA-Factory's ShareGPT form: the call is the value of a function_call turn, tools a JSON
# string of bare schemas, no ids (mens gives each call a stable 9-character one)
SHAREGPT = {"conversations": [
    {"from": "human", "value": "What's the weather in Paris?"},
    {"from": "function_call", "value": '{"name": "get_weather", "arguments": {"city": "Paris"}}'},
    {"from": "observation", "value": '{"temp_c": 18}'},
    {"from": "gpt", "value": "It is 18 °C in Paris."}],
    "tools": json.dumps([WEATHER["function"]])}
CONVERSATIONS = {"single": SINGLE, "multi": MULTI, "turns": TURNS, "sharegpt": SHAREGPT}


def read(raw: dict) -> dict:
    return normalize(raw, detect(raw))


def folded(messages: list[dict]) -> list[dict]:
    """A leading system turn folded into the first user turn, as mens does for Mistral."""
    if messages[0]["role"] != "system":
        return messages
    first = dict(messages[1], content=f"{messages[0]['content']}\n\n{messages[1]['content']}")
    return [first] + messages[2:]


def template(family: str) -> ChatTemplate:
    variables, tokens = FAMILIES[family]
    return ChatTemplate((FIXTURES / f"{family}.jinja").read_text(), variables, tokens, family)


def tokenizers(family: str):
    """(the `tokenizers` tokenizer mens encodes with, the transformers tokenizer around it: the
    tiny tokenizer.json with the family's special tokens and its template)."""
    from transformers import PreTrainedTokenizerFast

    variables, tokens = FAMILIES[family]
    hf = PreTrainedTokenizerFast(tokenizer_file=str(TINY / "tokenizer.json"), **variables,
                                 additional_special_tokens=tokens)
    hf.chat_template = (FIXTURES / f"{family}.jinja").read_text()
    return hf.backend_tokenizer, hf


def expected_spans(family: str, rec: dict) -> list[str]:
    """What each assistant turn must supervise, written out in the family's own syntax (not
    taken from mens's spans): the call(s) or the answer, then the end-of-turn token."""
    out = []
    for m in rec["messages"]:
        if m["role"] != "assistant":
            continue
        calls = [c["function"] for c in m.get("tool_calls") or []]
        if not calls:
            out.append(m["content"] + EOT[family])
        elif family.startswith("qwen"):
            out.append("\n".join(f'<tool_call>\n{{"name": "{c["name"]}", "arguments": '
                                 f'{json.dumps(c["arguments"])}}}\n</tool_call>' for c in calls)
                       + EOT[family])
        elif family.startswith("llama"):
            (c,) = calls
            out.append(f'{{"name": "{c["name"]}", "parameters": {json.dumps(c["arguments"])}}}'
                       + EOT[family])
        else:
            ids = [tc["id"] for tc in m["tool_calls"]]
            body = ", ".join(f'{{"name": "{c["name"]}", "arguments": '
                             f'{json.dumps(c["arguments"])}, "id": "{i}"}}'
                             for c, i in zip(calls, ids))
            out.append(f"[TOOL_CALLS] [{body}]" + EOT[family])
    return out


CASES = [(f, c) for f in FAMILIES for c in CONVERSATIONS
         if not (f.startswith("llama") and c == "multi")]


@pytest.mark.parametrize("family,conv", CASES)
def test_rendered_token_for_token_as_transformers_with_labels_on_calls_and_answers(family, conv):
    rec, tpl = read(CONVERSATIONS[conv]), template(family)
    tok, hf = tokenizers(family)
    stats: dict = {}
    ids, labels = tpl.encode(tok, rec["messages"], None, {}, stats, None, rec["tools"])
    # Mistral v0.3 writes a system prompt into the *last* user turn only; mens folds it into
    # the first (tests/data/test_template.py), so transformers is given the folded messages
    msgs = folded(rec["messages"]) if family == "mistral" else rec["messages"]
    want_text = hf.apply_chat_template(msgs, tools=rec["tools"], tokenize=False)
    rendered = tpl.render_spans(rec["messages"], {}, rec["tools"])
    assert rendered.text == want_text
    want_ids = hf.apply_chat_template(msgs, tools=rec["tools"], tokenize=True,
                                      return_dict=False)
    assert ids == list(want_ids)
    # the supervised tokens are exactly those overlapping each expected span
    text, at, want_sup = rendered.text, 0, set()
    enc = tok.encode(text, add_special_tokens=False)
    for piece in expected_spans(family, rec):
        start = text.index(piece, at)
        at = start + len(piece)
        want_sup |= {t for t, (a, b) in enumerate(enc.offsets) if a < at and b > start}
    assert {t for t, x in enumerate(labels) if x != IGNORE} == want_sup
    n = tool_calls(rec)
    assert (stats["tool_calls_read"], stats["tool_calls_rendered"],
            stats["tool_calls_supervised"]) == (n, n, n)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_syntax_is_read_from_the_template_and_parses_its_own_calls(family):
    tpl = template(family)
    assert tpl.syntax == syntax_of(tpl.source) == {"qwen3": "hermes", "qwen2_5": "hermes",
                                                   "llama3": "llama3", "llama3_3": "llama3",
                                                   "mistral": "mistral"}[family]
    rec = read(SINGLE)
    r = tpl.render_spans(rec["messages"], {}, rec["tools"])
    first = r.text[r.spans[0][0]:r.spans[0][1] - len(EOT[family])]
    got = parse(first, tpl.syntax)
    assert got.malformed is None
    assert [c["function"] for c in got.calls] == [
        {"name": "get_weather", "arguments": {"city": "Paris"}}]


def test_llama_refuses_two_calls_in_one_turn_as_a_clear_data_error():
    rec = read(MULTI)
    with pytest.raises(DataError, match="only supports single tool-calls"):
        template("llama3_3").encode(tokenizers("llama3_3")[0], rec["messages"],
                                    tools=rec["tools"])


def test_a_template_without_tools_refuses_unless_hermes_is_chosen():
    from mens.data.chat_template import BUILTIN

    plain = ("{%- for m in messages %}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
             "'<|im_end|>\\n' }}{%- endfor %}")
    rec = read(MULTI)
    with pytest.raises(DataError, match="data.tool_format=hermes"):
        ChatTemplate(plain, *QWEN, "plain").render_spans(rec["messages"], {}, rec["tools"])
    hermes = ChatTemplate(plain, *QWEN, "plain", tool_format="hermes")
    r = hermes.render_spans(rec["messages"], {}, rec["tools"])
    assert r.calls == ((r.spans[0][1], 2, 2),)
    # the Hermes text is what the tiny rung's own template (ChatML + tools) writes for the calls
    native = ChatTemplate(BUILTIN["chatml"], *QWEN, "chatml").render_spans(
        rec["messages"], {}, rec["tools"])
    assert [r.text[a:b] for a, b in r.spans] == [native.text[a:b] for a, b in native.spans]
    assert "data.tool_format=hermes" in r.note


def test_a_template_that_writes_only_the_answers_loses_nothing_silently():
    # renders the schemas and the calls' names, but not their arguments: every call lost
    lossy = ("{%- for t in tools %}{{ t.function.name }}{%- endfor %}{%- for m in messages %}"
             "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] }}{%- for c in m.tool_calls "
             "or [] %}<tool_call>{{ c.function.name }}</tool_call>{%- endfor %}"
             "{{- '<|im_end|>\\n' }}{%- endfor %}")
    rec = read(SINGLE)
    tpl = ChatTemplate(lossy, *QWEN, "lossy")
    assert not tpl.renders_tools()
    with pytest.raises(DataError, match="cannot render tools"):
        tpl.encode(tokenizers("qwen3")[0], rec["messages"], tools=rec["tools"])


def test_bad_tool_input_names_the_field():
    from mens.data.formats import Bad

    def bad(raw, match):
        with pytest.raises(Bad, match=match):
            read(raw)

    m = SINGLE["messages"]
    bad({**SINGLE, "messages": [m[0], {"role": "assistant", "content": None, "tool_calls": [
        {"function": {"name": "get_weather", "arguments": "{city: Paris}"}}]}]},
        r"messages\[1\].tool_calls\[0\].function.arguments` is not valid JSON")
    bad({**SINGLE, "messages": [m[0], {"role": "assistant", "content": None, "tool_calls": [
        {"function": {"name": "get_stock", "arguments": "{}"}}]}]},
        r"calls 'get_stock', which is not in the record's `tools` \(get_weather\)")
    # in a record that calls tools, every tool turn answers one (a record with no structured
    # call writes its calls as text, and its tool turns train as text: tests/data/test_corpus.py)
    bad({**SINGLE, "messages": [*m, {"role": "user", "content": "Thanks"},
                                {"role": "assistant", "content": "Hi"}, m[2], m[3]]},
        r"messages\[6\]` is a tool result that answers no call")
    bad({**SINGLE, "messages": [m[0], m[1], {**m[2], "tool_call_id": "nope"}, m[3]]},
        r"tool_call_id 'nope' matches no call")


def test_hermes_on_a_template_without_a_system_role_folds_the_tools_turn():
    """Gemma 2 refuses a system turn: the Hermes tools block (a system turn) is folded into the
    first user turn like any system prompt, in training and serving alike."""
    variables = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}
    tokens = ["<bos>", "<eos>", "<pad>", "<start_of_turn>", "<end_of_turn>"]
    tpl = ChatTemplate((FIXTURES / "gemma2.jinja").read_text(), variables, tokens, "gemma2",
                       tool_format="hermes")
    rec = read(SINGLE)
    r = tpl.render_spans(rec["messages"], {}, rec["tools"])
    assert r.text.startswith("<bos><start_of_turn>user\n# Tools") and r.calls == (
        (r.spans[0][1], 1, 1),)
    assert r.text[r.spans[0][0]:r.spans[0][1]].startswith("<tool_call>\n{\"name\": \"get_weather\"")
    prompt = tpl.prompt_text(rec["messages"][:1], {}, None, rec["tools"])
    assert r.text.startswith(prompt) and prompt.endswith("<start_of_turn>model\n")


def test_a_call_nested_past_the_json_parser_is_malformed_content_not_an_error():
    deep = "<tool_call>" + "[" * 100_000 + "</tool_call>"
    got = parse(deep, "hermes")
    assert got.calls == [] and got.content == deep and got.malformed
