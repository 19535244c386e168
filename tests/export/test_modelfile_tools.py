"""Ollama TEMPLATEs with tools: the Go text/template subset mens checks them with, the data
Ollama hands a template, and each real chat template (tests/data/fixtures/templates) getting a
TEMPLATE that renders its tool probes exactly as transformers renders the chat template.
Tokenizers only, no model: seconds."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from families_util import TOOL_TEMPLATES, make_tokenizer, tool_template

from mens.export import ollama
from mens.export.gotemplate import GoTemplateError, render
from mens.export.govalues import GoMap, go_json
from mens.export.modelfile import (TOOL_PROBES, TOOLS, check_modelfile, modelfile_plan,
                                   modelfile_text, render_go, template_mismatches)
from mens.export.ollama_templates import TEMPLATES

FIX = Path(__file__).parents[1] / "data" / "fixtures" / "templates"


def model_dir(tmp_path: Path, family: str, template: str | None) -> tuple[Path, object]:
    d = tmp_path / family
    tok = make_tokenizer(family, d, template)
    (d / "config.json").write_text(json.dumps({"model_type": family}))
    return d, tok


def test_go_subset_follows_text_template():
    """The rules that decide bytes: trim markers, dot and $, scopes, map order, and/or, eq."""
    data = GoMap({"M": [GoMap({"R": "a"}), GoMap({"R": "b"})], "K": GoMap({"z": 1, "a": 2}),
                  "E": "", "S": "x<y"})
    assert render("A  {{- .S -}}  \n B", data) == "Ax<yB"
    assert render("{{ range $i, $m := .M }}{{ $i }}{{ .R }}{{ $.S }};{{ end }}", data) == \
        "0ax<y;1bx<y;"
    assert render("{{ range $k, $v := .K }}{{ $k }}={{ $v }},{{ end }}", data) == "a=2,z=1,"
    assert render('{{ $s := "-" }}{{ range .M }}{{ $s }}{{ $s = "+" }}{{ end }}{{ $s }}', data) \
        == "-++"                                  # `=` assigns the outer variable
    assert render('{{ or .E "dflt" }}|{{ and .S .E }}|{{ eq .S "q" "x<y" }}', data) == \
        "dflt||true"                              # and/or return an operand; eq a b c
    assert render("{{ len (slice .M 1) }} {{ (index .M 1).R }} {{ json .S }}", data) == \
        '1 b "x\\u003cy"'                         # Go's json escapes < > & (HTML-safe)
    assert render('{{ define "t" }}[{{ . }}{{ $ }}]{{ end }}{{ template "t" .S }}', data) == \
        "[x<yx<y]"                                # in a template call, . and $ are its argument
    assert go_json({"b": [1.0, 2.5e-7, 1e21], "a": None}) == '{"a":null,"b":[1,2.5e-7,1e+21]}'


@pytest.mark.parametrize("src", ["{{ with .S }}x{{ end }}", "{{ .S | len }}", "{{/* c */}}",
                                 '{{ printf "%s" .S }}', "{{ upper .S }}", "{{ $nope }}",
                                 '{"a": {{{ json .S }}}', "{{ if .S }}x", "{{ end }}"])
def test_a_construct_the_checker_does_not_know_fails_loudly(src):
    with pytest.raises(GoTemplateError):
        render(src, GoMap({"S": "s"}))


def test_ollama_hands_a_template_parsed_maps_and_collated_messages():
    msgs = [{"role": "system", "content": "A"}, {"role": "user", "content": "u1"},
            {"role": "user", "content": "u2"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "f", "arguments": '{"z": 1, "a": "<b>"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "r1"},
            {"role": "tool", "tool_call_id": "c1", "content": "r2"}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"z": {"type": "integer", "minimum": 0}}}}}]
    v = ollama.values(msgs, tools)
    assert [m.fields["Role"] for m in v["Messages"]] == ["system", "user", "assistant", "tool",
                                                          "tool"]      # users merged, tools not
    assert v["Messages"][1].fields["Content"] == "u1\n\nu2" and v["System"] == "A"
    assert v["Messages"][3].fields["ToolName"] == "f"                 # from the call's id
    # Ollama's own `{{ .Function.Arguments }}`: Go's compact, sorted, HTML-escaped JSON — not
    # the `{"z": 1}` Jinja's tojson writes, hence the templates' pyjson helper
    assert render("{{ range .Messages }}{{ range .ToolCalls }}{{ .Function.Arguments }}"
                  "{{ end }}{{ end }}", v) == '{"a":"\\u003cb\\u003e","z":1}'
    assert render("{{ range .Tools }}{{ . }}{{ end }}", v) == (
        '{"type":"function","function":{"name":"f","description":"","parameters":'
        '{"type":"object","properties":{"z":{"type":"integer"}}}}}')    # minimum: dropped


EXPECT = {"qwen3": "qwen3", "qwen2": "qwen2.5", "llama": "llama3.1", "mistral": "mistral-v0.3"}


@pytest.mark.parametrize("family", list(TOOL_TEMPLATES))
def test_each_real_tool_template_gets_a_template_that_renders_its_tool_probes(family, tmp_path):
    hf, tok = model_dir(tmp_path, family, tool_template(family))
    template, stops, notes = modelfile_plan(hf)
    assert template == TEMPLATES[EXPECT[family]]
    assert len(notes) == 1 and "renders tools and" in notes[0] and "sorted order" in notes[0]
    compared = 0
    for msgs, tools in TOOL_PROBES:
        try:
            want = tok.apply_chat_template(msgs, tools=tools, tokenize=False,
                                           add_generation_prompt=True)
        except Exception:   # noqa: BLE001 — Llama 3.1 refuses two calls in one turn
            assert family == "llama"
            continue
        want = want.removeprefix(tok.bos_token or "\0")
        assert render_go(template, msgs, tools) == want
        compared += 1
    assert compared >= 3
    first = render_go(template, *TOOL_PROBES[0])   # the call is there, in the family's syntax
    args = '{"limit": 3, "query": "vox closures", "scope": "docs"}'
    assert {"qwen3": f'<tool_call>\n{{"name": "search", "arguments": {args}}}\n</tool_call>',
            "qwen2": f'<tool_call>\n{{"name": "search", "arguments": {args}}}\n</tool_call>',
            "llama": f'{{"name": "search", "parameters": {args}}}<|eot_id|>',
            "mistral": f'[TOOL_CALLS] [{{"name": "search", "arguments": {args}, '
                       f'"id": "call00001"}}]</s>'}[family] in first
    (tmp_path / "m.gguf").write_bytes(b"")
    (tmp_path / "Modelfile").write_text(modelfile_text("m.gguf", None, "test", hf_dir=hf))
    c = check_modelfile(tmp_path / "Modelfile", tok)
    assert c["tools"] and not c["template_mismatches"] and c["stops_are_tokens"]


def test_the_tiny_rungs_template_gets_the_chatml_tool_template(tmp_path):
    from mens.data.chat_template import CHATML
    hf, tok = model_dir(tmp_path, "qwen3", CHATML)
    assert modelfile_plan(hf)[0] == TEMPLATES["chatml-tools"]
    assert not template_mismatches(TEMPLATES["chatml-tools"], tok)


def test_requests_ollama_reshapes_are_caught_not_passed(tmp_path):
    """The probes use schemas Ollama keeps whole; ones it reshapes (properties out of sorted
    order, a key it has no field for) really render differently — the check sees it."""
    _, tok = model_dir(tmp_path, "qwen3", tool_template("qwen3"))
    go = TEMPLATES["qwen3"]
    msgs = TOOL_PROBES[3][0]
    props = TOOLS[0]["function"]["parameters"]["properties"]
    for changed in ({"query": props["query"], "limit": props["limit"]},          # unsorted
                    {**props, "limit": {**props["limit"], "minimum": 1}}):      # unmodelled
        tools = [{"type": "function", "function": {**TOOLS[0]["function"], "parameters": {
            **TOOLS[0]["function"]["parameters"], "properties": changed}}}]
        want = tok.apply_chat_template(msgs, tools=tools, tokenize=False,
                                       add_generation_prompt=True)
        assert render_go(go, msgs, tools) != want
    assert template_mismatches(go.replace("<tool_response>", "<tool_result>"), tok)
    assert template_mismatches("{{ with .Tools }}x{{ end }}", tok) == [
        "TEMPLATE cannot be checked: TEMPLATE uses a Go construct mens does not check: "
        "{{ with .Tools }}"]


@pytest.mark.parametrize("family,fixture", [("gemma2", "gemma2.jinja"),
                                            ("gemma3_text", "gemma3.jinja"), ("qwen3", None)])
def test_a_template_without_tools_gets_no_tools_and_says_so(family, fixture, tmp_path):
    hf, _ = model_dir(tmp_path, family, (FIX / fixture).read_text() if fixture else None)
    template, _, notes = modelfile_plan(hf)
    assert template is not None and ".Tools" not in template
    assert len(notes) == 1 and "renders no tools" in notes[0] and "refuses" in notes[0]


def test_tools_no_go_template_renders_fall_back_to_a_plain_template_loudly(tmp_path):
    """Qwen3 with its tool results renamed: no TEMPLATE renders its tools, the plain ChatML one
    renders its chats — written without .Tools, and the note says TOOLS NOT RENDERED."""
    hf, _ = model_dir(tmp_path, "qwen3", tool_template("qwen3").replace("tool_response",
                                                                        "tool_output"))
    template, _, notes = modelfile_plan(hf)
    assert template == TEMPLATES["chatml"]
    assert "TOOLS NOT RENDERED" in notes[0] and "hermes" in notes[0]


@pytest.mark.parametrize("family,fixture,want", [("qwen3", None, "qwen3"),
                                                 ("gemma2", "gemma2.jinja", "gemma")])
def test_a_run_trained_with_hermes_tools_gets_them_where_a_template_can(family, fixture, want,
                                                                       tmp_path):
    """data.tool_format=hermes on a tool-less template: the reference is what mens trained on
    (mens.data's Hermes rendering); plain ChatML + Hermes is exactly Qwen3's layout, Gemma has
    no Go template with tools: a plain one and TOOLS NOT RENDERED."""
    from mens.export.modelfile import hermes_reference

    hf, tok = model_dir(tmp_path, family, (FIX / fixture).read_text() if fixture else None)
    template, _, notes = modelfile_plan(hf, tool_format="hermes")
    assert template == TEMPLATES[want] and len(notes) == 1
    if want == "qwen3":
        assert "data.tool_format=hermes" in notes[0] and "renders tools" in notes[0]
        ref = hermes_reference(hf)
        for msgs, tools in TOOL_PROBES:
            assert render_go(template, msgs, tools) == ref(msgs, tools)
        assert template_mismatches(template, tok, tools=True)   # the raw template drops tools
        assert not template_mismatches(template, tok, reference=ref)
    else:
        assert "TOOLS NOT RENDERED" in notes[0] and "tool_format=hermes" in notes[0]
