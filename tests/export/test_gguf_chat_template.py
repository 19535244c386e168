"""The GGUF keeps the chat template that renders tools, and llama.cpp renders a tool conversation
from it exactly as transformers renders the tokenizer's template (issue #38).

Models: the tiny rung (its own ChatML-with-tools template) and tiny random Qwen3, Qwen2.5,
Llama 3.1 and Mistral v0.3 models carrying those families' real templates (families_util,
tests/data/fixtures/templates). Engines, per test:
  * test_gguf_carries_the_tokenizers_whole_template — gguf-py's reader;
  * test_llama_cpp_python_renders_the_gguf_template_like_transformers (fast) — llama-cpp-python's
    own path: llama.cpp loads the GGUF (vocab only), its metadata gives the template and
    BOS/EOS, llama_chat_format.Jinja2ChatFormatter (jinja2) renders it;
  * test_llama_server_jinja_path_renders_it_like_transformers (slow) — llama.cpp's C++ path, as
    `llama-server --jinja` renders a chat request: common/chat.cpp + common/jinja, compiled from
    the installed llama-cpp-python's sdist (tests/export/llama_jinja.py; ~2.5 CPU-minutes once,
    then cached).
The reference is transformers' `apply_chat_template(messages, tools=…)` with mens's canonical
messages (arguments as objects, content "" beside calls); llama.cpp gets the request as OpenAI
clients send it (arguments as a JSON string, content null).
"""
from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest
from families_util import TOOL_TEMPLATES, make_model, make_tokenizer, tool_template

from mens.export.modelfile import TOOL_PROBES

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed: "
                                "`make install` builds it (dev extra, ~8 min on 2 cores)")

WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
# the record: a call with null content, its result, the final answer (rendered whole, as
# training sees it) — and up to the call's result, with the generation prompt (as serving sees it)
RECORD = [{"role": "user", "content": "What is the weather in Paris?"},
          {"role": "assistant", "content": None, "tool_calls": [{
              "id": "call00001", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
          {"role": "tool", "tool_call_id": "call00001", "name": "get_weather",
           "content": "sunny, 21 C"},
          {"role": "assistant", "content": "It is sunny in Paris, 21 C."}]
CASES = [(RECORD, WEATHER, False), (RECORD[:3], WEATHER, True)] + \
    [(m, t, True) for m, t in TOOL_PROBES]


def canonical(messages: list[dict]) -> list[dict]:
    """mens's form of an OpenAI request (mens.data.tools): arguments as objects, null -> ""."""
    out = copy.deepcopy(messages)
    for m in out:
        m["content"] = m.get("content") or ""
        for c in m.get("tool_calls") or []:
            if isinstance(c["function"]["arguments"], str):
                c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return out


def wire(messages: list[dict]) -> list[dict]:
    """As an OpenAI client sends it: arguments as JSON strings."""
    out = copy.deepcopy(messages)
    for m in out:
        for c in m.get("tool_calls") or []:
            if not isinstance(c["function"]["arguments"], str):
                c["function"]["arguments"] = json.dumps(c["function"]["arguments"])
    return out


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    """{name: (gguf path, transformers tokenizer)}: the tiny rung and each tool family."""
    import torch
    from transformers import AutoTokenizer

    from mens.export.gguf import write_model_gguf
    from mens.export.merge import SafetensorsDir
    from mens.resources import ASSETS

    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("ggufs")
    out = {"tiny": (write_model_gguf(SafetensorsDir(ASSETS / "tiny"), ASSETS / "tiny",
                                     tmp / "tiny.gguf", "f16", "tiny"),
                    AutoTokenizer.from_pretrained(str(ASSETS / "tiny")))}
    for fam in TOOL_TEMPLATES:
        hf = tmp / fam
        tok = make_tokenizer(fam, hf, tool_template(fam))
        make_model(fam, hf, len(tok))
        out[fam] = (write_model_gguf(SafetensorsDir(hf), hf, tmp / f"{fam}.gguf", "f32", fam), tok)
    return out


def reference(tok, messages, tools, gen: bool) -> str | None:
    """transformers' text, or None where the template itself refuses the conversation."""
    try:
        return tok.apply_chat_template(canonical(messages), tools=tools, tokenize=False,
                                       add_generation_prompt=gen)
    except Exception:  # noqa: BLE001 — Llama 3.1's raise_exception: one call per turn
        return None


def test_gguf_carries_the_tokenizers_whole_template(ggufs):
    import gguf

    from mens.data.tool_syntax import syntax_of

    for name, (path, tok) in ggufs.items():
        f = gguf.GGUFReader(path).fields
        t = f["tokenizer.chat_template"].contents()
        assert t == tok.chat_template, name
        assert syntax_of(t) == {"tiny": "hermes", "qwen3": "hermes", "qwen2": "hermes",
                                "llama": "llama3", "mistral": "mistral"}[name]


def test_the_export_notes_llama_servers_date(tmp_path):
    """The slow test below found it: llama-server dates Llama 3.1 prompts today; say so."""
    from mens.export.gguf import template_notes

    make_tokenizer("llama", tmp_path / "l", tool_template("llama"))
    make_tokenizer("qwen3", tmp_path / "q", tool_template("qwen3"))
    (note,) = template_notes(tmp_path / "l")
    assert "26 Jul 2024" in note and "--chat-template-kwargs" in note
    assert template_notes(tmp_path / "q") == []


def test_a_named_tool_use_template_goes_in_as_its_own_key(tmp_path):
    import gguf

    from mens.export.gguf import write_model_gguf
    from mens.export.merge import SafetensorsDir

    hf = tmp_path / "hf"
    tok = make_tokenizer("qwen3", hf)
    tok.chat_template = {"default": tok.chat_template, "tool_use": tool_template("qwen3")}
    tok.save_pretrained(str(hf))
    make_model("qwen3", hf, len(tok))
    f = gguf.GGUFReader(write_model_gguf(SafetensorsDir(hf), hf, tmp_path / "m.gguf", "f32",
                                         "m")).fields
    assert f["tokenizer.chat_template"].contents() == tok.chat_template["default"]
    assert f["tokenizer.chat_template.tool_use"].contents() == tool_template("qwen3")


def test_the_gguf_takes_the_template_transformers_uses(tmp_path):
    """A model dir with both chat_template.jinja and a tokenizer_config.json template: gguf-py
    alone would take the config's, transformers renders (and mens trains) with the .jinja."""
    import shutil

    import gguf
    from transformers import AutoTokenizer

    from mens.export.gguf import write_model_gguf
    from mens.export.merge import SafetensorsDir
    from mens.resources import ASSETS

    hf = tmp_path / "tiny"
    shutil.copytree(ASSETS / "tiny", hf)
    (hf / "chat_template.jinja").write_text(tool_template("qwen3"))
    assert gguf.SpecialVocab(hf).chat_template != tool_template("qwen3")     # gguf-py's pick
    assert AutoTokenizer.from_pretrained(str(hf)).chat_template == tool_template("qwen3")
    p = write_model_gguf(SafetensorsDir(hf), hf, tmp_path / "m.gguf", "q8_0", "m")
    assert gguf.GGUFReader(p).fields["tokenizer.chat_template"].contents() == \
        tool_template("qwen3")


def test_llama_cpp_python_renders_the_gguf_template_like_transformers(ggufs):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    compared = 0
    for name, (path, tok) in ggufs.items():
        llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        meta = llm.metadata
        token = lambda key: llm.detokenize([int(meta[key])], special=True).decode()  # noqa: E731
        bos = token("tokenizer.ggml.bos_token_id") if "tokenizer.ggml.bos_token_id" in meta \
            else ""
        for msgs, tools, gen in CASES:
            want = reference(tok, msgs, tools, gen)
            if want is None:
                continue
            fmt = Jinja2ChatFormatter(template=meta["tokenizer.chat_template"],
                                      eos_token=token("tokenizer.ggml.eos_token_id"),
                                      bos_token=bos, add_generation_prompt=gen)
            got = fmt(messages=canonical(msgs), tools=tools).prompt
            assert got == want, (name, msgs)
            compared += 1
        del llm
    assert compared >= 5 * len(CASES) - 2          # Llama 3.1 refuses the two-call probe


@pytest.mark.slow
def test_llama_server_jinja_path_renders_it_like_transformers(ggufs):
    import gguf
    from llama_jinja import Unavailable, build, render

    try:
        exe = build()
    except Unavailable as e:
        pytest.skip(f"llama.cpp's jinja renderer cannot be built here: {e}")
    compared = 0
    for name, (path, tok) in ggufs.items():
        f = gguf.GGUFReader(path).fields
        add_bos = "tokenizer.ggml.add_bos_token" in f and \
            f["tokenizer.ggml.add_bos_token"].contents()
        for msgs, tools, gen in CASES:
            want = reference(tok, msgs, tools, gen)
            if want is None:
                continue
            if add_bos:      # llama.cpp leaves BOS to the tokenizer (common_chat_templates_apply)
                want = want.removeprefix(tok.bos_token)
            request = {"messages": wire(msgs), "tools": tools, "add_generation_prompt": gen}
            if "date_string" in f["tokenizer.chat_template"].contents():
                # llama-server sets Llama 3.1's date_string to today ("Today Date: 03 Dec 2026")
                # where transformers (and mens's training) keep the template's 26 Jul 2024: the
                # only difference, and a request's chat_template_kwargs undoes it
                today = render(exe, Path(path), request)
                assert today != want and today.replace(
                    time.strftime("Today Date: %d %b %Y"), "Today Date: 26 Jul 2024") == want
                request["chat_template_kwargs"] = {"date_string": "26 Jul 2024"}
            assert render(exe, Path(path), request) == want, (name, msgs)
            compared += 1
    assert compared >= 5 * len(CASES) - 2
