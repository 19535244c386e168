"""Ollama TEMPLATEs (Go text/template) for the chat formats mens exports, tools included.

Each renders, from the data Ollama gives a template (mens/export/ollama.py), the text the model's
own chat template renders — the check in mens/export/modelfile.py proves it per model on probe
conversations. They follow Ollama's published tool templates (ollama/ollama @ 8cd2b6478:
tools/testdata/qwen2.5.gotmpl, qwen3.gotmpl, llama3.2.gotmpl; @ 95abc54ae:
server/testdata/tools/mistral.gotmpl — `range .Tools`, `.ToolCalls`, `.Function.Name`,
`.Function.Arguments`, `$.Tools`, `$last := eq (len (slice $.Messages $i)) 1`) but write what the
Hugging Face templates write, where Ollama's own differ from them:
  * JSON the Jinja way. Jinja's `tojson` (transformers, llama.cpp) writes `{"city": "Paris"}`;
    Go's json (Ollama's `{{ .Function.Arguments }}`, `json`) writes `{"city":"Paris"}`. The
    `pyjson` helper writes any JSON value with Python's separators (maps in Go's sorted order,
    scalars through `json`), `params` a schema's parameters, `schema4` a tool as
    `tojson(indent=4)` (Llama 3.1) — over the fields Ollama keeps of a schema.
  * The layouts of the HF templates (Qwen's grouped <tool_response> user turn, Llama 3.1's tools
    in the first user message and quoted ipython results, Mistral v0.3's [AVAILABLE_TOOLS] before
    the last user turn, its 9-character call ids, the system prompt only in the last [INST]).
Ollama adds BOS itself, so no template writes it. A template here never trims contents, so a
chat template's `| trim` agrees only for contents without outer white space (as the probes are).
"""
from __future__ import annotations

# any JSON value as Python's json.dumps writes it (", " and ": "); maps in sorted key order
PYJSON = (
    '{{- define "pyjson" }}{{ $j := json . }}{{ $c := slice $j 0 1 }}'
    '{{ if eq $c "{" }}{ {{- $s := "" }}{{ range $k, $v := . }}{{ $s }}{{ json $k }}: '
    '{{ template "pyjson" $v }}{{ $s = ", " }}{{ end }}}'
    '{{ else if eq $c "[" }}[{{ range $i, $v := . }}{{ if $i }}, {{ end }}'
    '{{ template "pyjson" $v }}{{ end }}]{{ else }}{{ $j }}{{ end }}{{ end }}')
# a tool's "parameters" as tojson writes an OpenAI schema {type, properties, required}
PARAMS = (
    '{{- define "params" }}{"type": {{ json .Type }}, "properties": { {{- $s := "" }}'
    '{{ range $k, $p := .Properties }}{{ $s }}{{ json $k }}: {"type": {{ json $p.Type }}'
    '{{ if $p.Description }}, "description": {{ json $p.Description }}{{ end }}'
    '{{ if $p.Enum }}, "enum": {{ template "pyjson" $p.Enum }}{{ end }}}{{ $s = ", " }}{{ end }}}'
    '{{ if .Required }}, "required": {{ template "pyjson" .Required }}{{ end }}}{{ end }}')
SCHEMA = (
    '{{- define "schema" }}{"type": "function", "function": {"name": {{ json .Function.Name }}, '
    '{{ if .Function.Description }}"description": {{ json .Function.Description }}, {{ end }}'
    '"parameters": {{ template "params" .Function.Parameters }}}}{{ end }}')
# tojson(indent=4) of a tool (Llama 3.1 / 3.3); `{{ "{" }}` where a brace meets an action ({{{)
def _n(depth: int) -> str:
    return "\n" + " " * 4 * depth


SCHEMA4 = (
    '{{- define "schema4" }}{' + _n(1) + '"type": "function",' + _n(1) + '"function": {'
    + _n(2) + '"name": {{ json .Function.Name }},' + _n(2)
    + '{{ if .Function.Description }}"description": {{ json .Function.Description }},' + _n(2)
    + '{{ end }}"parameters": {' + _n(3) + '"type": {{ json .Function.Parameters.Type }},'
    + _n(3) + '"properties": {{ "{" }}{{ $s := "" }}'
    + '{{ range $k, $p := .Function.Parameters.Properties }}{{ $s }}' + _n(4)
    + '{{ json $k }}: {' + _n(5) + '"type": {{ json $p.Type }}'
    + '{{ if $p.Description }},' + _n(5) + '"description": {{ json $p.Description }}{{ end }}'
    + '{{ if $p.Enum }},' + _n(5) + '"enum": [{{ range $i, $e := $p.Enum }}{{ if $i }},{{ end }}'
    + _n(6) + '{{ json $e }}{{ end }}' + _n(5) + ']{{ end }}' + _n(4) + '}{{ $s = "," }}{{ end }}'
    + _n(3) + '}{{ if .Function.Parameters.Required }},' + _n(3) + '"required": ['
    + '{{ range $i, $r := .Function.Parameters.Required }}{{ if $i }},{{ end }}' + _n(4)
    + '{{ json $r }}{{ end }}' + _n(3) + ']{{ end }}' + _n(2) + '}' + _n(1) + '}\n}{{ end }}')

HERMES_TOOLS = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n"
                "<tools>{{ range .Tools }}\n{{ template \"schema\" . }}{{ end }}\n</tools>\n\n"
                "For each function call, return a json object with function name and arguments "
                "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
                "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n")
# an assistant turn's calls, Hermes style: "\n" between blocks, and after non-empty content
HERMES_CALLS = ('{{ range $j, $c := .ToolCalls }}{{ if or $j $m.Content }}\n{{ end }}<tool_call>\n'
                '{"name": "{{ .Function.Name }}", "arguments": '
                '{{ template "pyjson" .Function.Arguments }}}\n</tool_call>{{ end }}')

# plain ChatML (and Ollama's chatml.gotmpl): no tools
CHATML_GO = ("{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n"
             "{{ end }}<|im_start|>assistant\n")
# ChatML as mens's tiny rung writes it (mens.data.chat_template.CHATML): tools in the system turn,
# each message <|im_start|>{role}\n{content}[calls]<|im_end|>, tool results as a `tool` turn
CHATML_TOOLS_GO = (PYJSON + PARAMS + SCHEMA
             + '{{- if .Tools }}<|im_start|>system\n{{ if eq (index .Messages 0).Role "system" }}'
             '{{ (index .Messages 0).Content }}\n\n{{ end }}' + HERMES_TOOLS + '{{ end }}'
             '{{- range $i, $m := .Messages }}'
             '{{- if not (and $.Tools (eq $i 0) (eq .Role "system")) }}<|im_start|>{{ .Role }}\n'
             '{{ .Content }}' + HERMES_CALLS + '<|im_end|>\n{{ end }}'
             '{{- end }}<|im_start|>assistant\n')


def qwen_go(default_system: str | None) -> str:
    """Qwen3 (default_system None) and Qwen2.5 (its "You are Qwen, …" default system turn):
    tool results grouped in one user turn of <tool_response> blocks."""
    sys_open = ('{{ if eq (index .Messages 0).Role "system" }}{{ (index .Messages 0).Content }}'
                + ('{{ else }}' + default_system if default_system else '') + '{{ end }}')
    header = ('{{- if .Tools }}<|im_start|>system\n' + sys_open + ('\n\n' if default_system else '')
              + ('' if default_system else '{{ if eq (index .Messages 0).Role "system" }}\n\n'
                                            '{{ end }}')
              + HERMES_TOOLS + '{{ else if eq (index .Messages 0).Role "system" }}'
              '<|im_start|>system\n{{ (index .Messages 0).Content }}<|im_end|>\n'
              + ('{{ else }}<|im_start|>system\n' + default_system + '<|im_end|>\n'
                 if default_system else '') + '{{ end }}')
    return (PYJSON + PARAMS + SCHEMA + header
            + '{{- $prev := "" }}{{ range $i, $m := .Messages }}{{ $rest := slice $.Messages $i }}'
            '{{- if eq .Role "tool" }}{{ if ne $prev "tool" }}<|im_start|>user{{ end }}\n'
            '<tool_response>\n{{ .Content }}\n</tool_response>'
            '{{ if or (eq (len $rest) 1) (ne (index $rest 1).Role "tool") }}<|im_end|>\n{{ end }}'
            '{{- else if not (and (eq $i 0) (eq .Role "system")) }}<|im_start|>{{ .Role }}\n'
            '{{ .Content }}' + HERMES_CALLS + '<|im_end|>\n{{ end }}'
            '{{- $prev = .Role }}{{ end }}<|im_start|>assistant\n')


QWEN3_GO = qwen_go(None)
QWEN25_GO = qwen_go("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")

LLAMA3_GO = ("{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n"
             "{{ .Content }}<|eot_id|>{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n")
# Llama 3.1 / 3.3 (date_string "26 Jul 2024"): tools in the first user turn, one JSON call per
# assistant turn {"name", "parameters"}, results as an `ipython` turn holding the tojson'd text
LLAMA31_GO = (
    PYJSON + SCHEMA4 + '{{- $sys := eq (index .Messages 0).Role "system" }}'
    '<|start_header_id|>system<|end_header_id|>\n\n{{ if .Tools }}Environment: ipython\n{{ end }}'
    'Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n'
    '{{ if $sys }}{{ (index .Messages 0).Content }}{{ end }}<|eot_id|>'
    '{{- $first := 0 }}{{ if $sys }}{{ $first = 1 }}{{ end }}'
    '{{- range $i, $m := .Messages }}{{ if and $sys (eq $i 0) }}'
    '{{ else if and $.Tools (eq $i $first) }}<|start_header_id|>user<|end_header_id|>\n\n'
    'Given the following functions, please respond with a JSON for a function call with its '
    'proper arguments that best answers the given prompt.\n\nRespond in the format '
    '{"name": function name, "parameters": dictionary of argument name and its value}.'
    'Do not use variables.\n\n'
    '{{ range $.Tools }}{{ template "schema4" . }}\n\n{{ end }}{{ .Content }}<|eot_id|>'
    '{{ else if .ToolCalls }}<|start_header_id|>assistant<|end_header_id|>\n\n'
    '{{ range .ToolCalls }}{"name": "{{ .Function.Name }}", "parameters": '
    '{{ template "pyjson" .Function.Arguments }}}{{ end }}<|eot_id|>'
    '{{ else if eq .Role "tool" }}<|start_header_id|>ipython<|end_header_id|>\n\n'
    '{{ json .Content }}<|eot_id|>'
    '{{ else }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>'
    '{{ end }}{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n')

# Gemma has no system turn: its chat template folds a leading system message into the first
# user turn ("<start_of_turn>user\n" + system + "\n\n" + user), and calls the assistant "model".
# It has no tool format, so this TEMPLATE has no .Tools (Ollama then refuses tool requests).
_FOLDED = '(and (eq $i 1) (eq (index $.Messages 0).Role "system"))'
GEMMA_GO = ("{{- range $i, $m := .Messages }}{{ if eq .Role \"system\" }}<start_of_turn>user\n"
            "{{ .Content }}\n\n{{ else }}{{ if not " + _FOLDED + " }}<start_of_turn>"
            "{{ if eq .Role \"assistant\" }}model{{ else }}{{ .Role }}{{ end }}\n{{ end }}"
            "{{ .Content }}<end_of_turn>\n{{ end }}{{ end }}<start_of_turn>model\n")
# Mistral [INST] (mens's simple form): a leading system message prefixes the first user message.
MISTRAL_GO = ("{{- range $i, $m := .Messages }}{{ if eq .Role \"system\" }}[INST] {{ .Content }}"
              "\n\n{{ else if eq .Role \"user\" }}{{ if not " + _FOLDED + " }}[INST] {{ end }}"
              "{{ .Content }}[/INST]{{ else }}{{ .Content }}</s>{{ end }}{{ end }}")
# Mistral-7B-Instruct v0.3: the system prompt joins the *last* user turn (only when it is the
# last message), [AVAILABLE_TOOLS] precedes the last user turn, calls carry their 9-char ids
MISTRAL_V3_GO = (
    PYJSON + PARAMS + '{{- $lastUser := -1 }}{{ range $i, $m := .Messages }}'
    '{{ if eq .Role "user" }}{{ $lastUser = $i }}{{ end }}{{ end }}'
    '{{- range $i, $m := .Messages }}{{ $last := eq (len (slice $.Messages $i)) 1 }}'
    '{{- if eq .Role "user" }}{{ if and $.Tools (eq $i $lastUser) }}[AVAILABLE_TOOLS] ['
    '{{ range $j, $t := $.Tools }}{{ if $j }}, {{ end }}{"type": "function", "function": '
    '{"name": "{{ .Function.Name }}", {{ if .Function.Description }}"description": '
    '"{{ .Function.Description }}", {{ end }}"parameters": '
    '{{ template "params" .Function.Parameters }}}}{{ end }}][/AVAILABLE_TOOLS]{{ end }}'
    '{{ if and $last $.System }}[INST] {{ $.System }}\n\n{{ .Content }}[/INST]'
    '{{ else }}[INST] {{ .Content }}[/INST]{{ end }}'
    '{{- else if .ToolCalls }}[TOOL_CALLS] [{{ range $j, $c := .ToolCalls }}{{ if $j }}, {{ end }}'
    '{"name": {{ json .Function.Name }}, "arguments": {{ template "pyjson" .Function.Arguments }},'
    ' "id": "{{ .ID }}"}{{ end }}]</s>'
    '{{- else if eq .Role "assistant" }} {{ .Content }}</s>'
    '{{- else if eq .Role "tool" }}[TOOL_RESULTS] {"content": {{ .Content }}, '
    '"call_id": "{{ .ToolCallID }}"}[/TOOL_RESULTS]{{ end }}{{ end }}')

# every TEMPLATE by name; those naming .Tools render tools (Ollama offers tools only for them)
# Phi-3 / Phi-3.5 (<|role|>\n…<|end|>\n) and Phi-4 (<|im_start|>role<|im_sep|>…<|im_end|>):
# their published templates, system turns kept as turns, no tools
PHI3_GO = ("{{- range .Messages }}<|{{ .Role }}|>\n{{ .Content }}<|end|>\n{{ end }}"
           "<|assistant|>\n")
PHI4_GO = ("{{- range .Messages }}<|im_start|>{{ .Role }}<|im_sep|>{{ .Content }}<|im_end|>"
           "{{ end }}<|im_start|>assistant<|im_sep|>")
TEMPLATES = {"chatml": CHATML_GO, "chatml-tools": CHATML_TOOLS_GO, "qwen3": QWEN3_GO,
             "qwen2.5": QWEN25_GO, "llama3": LLAMA3_GO, "llama3.1": LLAMA31_GO, "gemma": GEMMA_GO,
             "mistral": MISTRAL_GO, "mistral-v0.3": MISTRAL_V3_GO, "phi3": PHI3_GO,
             "phi4": PHI4_GO}
# chat format -> (its TEMPLATEs by name, tried in order; the format's stop strings)
FORMATS = {"chatml": (("chatml", "chatml-tools", "qwen3", "qwen2.5"),
                      ("<|im_end|>", "<|endoftext|>")),
           "llama3": (("llama3", "llama3.1"), ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")),
           "gemma": (("gemma",), ("<end_of_turn>",)),
           "mistral": (("mistral", "mistral-v0.3"), ("</s>",)),
           # (stops not in the tokenizer's vocab are dropped: Phi-3 ends turns with <|end|>,
           # Phi-4 with <|im_end|>)
           "phi3": (("phi3", "phi4"), ("<|end|>", "<|im_end|>", "<|endoftext|>"))}
