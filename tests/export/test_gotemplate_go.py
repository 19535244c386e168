"""mens's Go text/template subset (mens/export/gotemplate.py) against Go's own text/template.

Ollama cannot run here, so the Modelfile check renders a TEMPLATE in Python; this test renders
every TEMPLATE mens writes, for every probe (and requests that stress the rules: `<>&` and
non-ASCII in strings, floats, nested and unsorted arguments, merged turns), with the real Go
engine and encoding/json (tests/export/gotmpl/main.go, over the same Ollama-shaped values) and
requires the same bytes. Needs a Go toolchain (`apt-get install golang-go`); builds in seconds.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from mens.export.gotemplate import GoTemplateError
from mens.export.modelfile import PROBES, TOOL_PROBES, TOOLS, render_go
from mens.export.ollama_templates import TEMPLATES

GO = shutil.which("go")
pytestmark = pytest.mark.skipif(GO is None, reason="no Go toolchain (`apt-get install "
                                "golang-go`): mens's Go subset is checked against it")
HERE = os.path.dirname(__file__)

STRESS = [
    ([{"role": "system", "content": "a & b <c>"}, {"role": "user", "content": "naïve → 日本"},
      {"role": "user", "content": "twice"},
      {"role": "assistant", "content": None, "tool_calls": [{
          "id": "call00001", "type": "function", "function": {
              "name": "search", "arguments": json.dumps(
              {"query": "x <y> & \"z\"\n", "limit": 2.5, "n": 10, "tiny": 1e-7, "big": 1e21,
               "tags": ["a", {"k": [True, None]}], "empty": {}})}}]},
      {"role": "tool", "tool_call_id": "call00001", "content": "é\tok"}], TOOLS),
]


@pytest.fixture(scope="module")
def go_render(tmp_path_factory):
    d = tmp_path_factory.mktemp("gotmpl")
    env = {**os.environ, "GOCACHE": str(d / "cache"), "GOPATH": str(d / "gopath"),
           "GO111MODULE": "off"}
    p = subprocess.run([GO, "build", "-o", str(d / "render"), os.path.join(HERE, "gotmpl",
                                                                           "main.go")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr

    def run(template: str, messages, tools):
        r = subprocess.run([str(d / "render")], capture_output=True, text=True, timeout=60,
                           input=json.dumps({"template": template, "messages": messages,
                                             "tools": tools or []}))
        return r.stdout if r.returncode == 0 else RuntimeError(r.stderr)
    return run


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_every_template_renders_as_go_does(name, go_render):
    template, n = TEMPLATES[name], 0
    for msgs, tools in [(m, None) for m in PROBES] + TOOL_PROBES + STRESS:
        want = go_render(template, msgs, tools)
        try:
            got = render_go(template, msgs, tools)
        except GoTemplateError as e:
            assert isinstance(want, RuntimeError), (name, msgs, e)
            continue
        assert got == want, (name, msgs)
        n += 1
    assert n >= len(PROBES)


@pytest.mark.parametrize("src", [
    "A  {{- .System -}}  \n B{{ range $i, $m := .Messages }}{{ if $i }},{{ end }}{{ .Role }}"
    "{{ end }}",
    '{{ $s := "-" }}{{ range .Messages }}{{ $s }}{{ $s = "+" }}{{ end }}{{ $s }}',
    '{{ or .Response "d" }}|{{ and .System .Response }}|{{ eq .System "q" "S" }}|'
    '{{ len (slice .Messages 1) }}|{{ (index .Messages 0).Role }}|{{ slice .System 0 1 }}',
    '{{ define "t" }}[{{ . }}{{ $ }}]{{ end }}{{ template "t" .System }}{{ .Tools }}',
    "{{ range .Tools }}{{ range $k, $p := .Function.Parameters.Properties }}{{ $k }}={{ $p.Type }}"
    " {{ json $p }};{{ end }}{{ .Function.Parameters.Properties }}{{ end }}",
    "{{ range .Messages }}{{ range .ToolCalls }}{{ .Function.Arguments }}{{ json .Function }}"
    "{{ end }}{{ end }}",
])
def test_the_rules_the_templates_lean_on_are_gos(src, go_render):
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
             "function": {"name": "f", "arguments": '{"b": [1, 2.0], "a": "<&>"}'}}]}]
    assert render_go(src, msgs, TOOLS) == go_render(src, msgs, TOOLS)
