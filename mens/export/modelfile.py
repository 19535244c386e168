"""Ollama Modelfile: write it, read it back, and check its TEMPLATE against the chat template.

Ollama's TEMPLATE is a Go template; the model's chat template is Jinja. mens has Go templates per
chat format (mens/export/ollama_templates.py: ChatML / Qwen, Llama 3 / 3.1, Gemma, Mistral) and
proves the one it writes agrees with the tokenizer's chat template by rendering both for probe
conversations: the Go side with mens/export/gotemplate.py (a Go text/template subset; a
construct it does not know fails the check) over the data Ollama gives a template for the same
OpenAI request (mens/export/ollama.py). Ollama itself cannot run here, so this is the check we
have. When the chat template writes tool calls (mens.data.tool_syntax), the probes include tools,
calls (several in a turn, results, a later turn) and a TEMPLATE must render them too; when it
writes none, the TEMPLATE has no `.Tools` — Ollama then refuses tool requests for the model,
rather than framing them in a way it was never trained on — and the notes say so. When no
TEMPLATE renders like the chat template, the Modelfile is written without TEMPLATE and says why
(and `modelfile_plan` returns the note for the export manifest): Ollama then falls back to the
GGUF's own chat template (which the GGUF keeps whole: mens/export/gguf.py).

The probes' tool schemas are ones Ollama keeps whole: properties in sorted order with only
type/description/enum. Ollama parses a request's schemas into structs and its call arguments
into Go maps before any template runs, so keys come out sorted and schema keys it has no field
for (default, minimum, format …) are gone; no TEMPLATE can restore them. `TOOL_NOTE` says this
in the export's notes. The BOS token: Ollama (like llama.cpp) adds it when tokenizing the
rendered prompt, so a chat template's leading `bos_token` is not part of TEMPLATE and is dropped
before comparing.
"""
from __future__ import annotations

import re
from pathlib import Path

from mens.export import ollama
from mens.export.gotemplate import GoTemplateError, render
from mens.export.ollama_templates import (CHATML_GO, FORMATS as _FORMATS, GEMMA_GO,  # noqa: F401
                                          LLAMA3_GO, MISTRAL_GO, TEMPLATES)
from mens.source.families import FAMILIES

# chat format -> (its Go templates in the order tried, stop strings) (mens.source.families .chat)
FORMATS = {f: ([TEMPLATES[n] for n in names], stops) for f, (names, stops) in _FORMATS.items()}
STOPS = FORMATS["chatml"][1]
PROBES = [
    [{"role": "user", "content": "Write a Vox function that adds two numbers."}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"},
     {"role": "assistant", "content": "hello"}, {"role": "user", "content": "fix: let x = ;"}],
    [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
     {"role": "user", "content": "three"}],
]
TOOLS = [
    {"type": "function", "function": {
        "name": "search", "description": "Search the Vox docs.", "parameters": {
            "type": "object", "properties": {
                "limit": {"type": "integer", "description": "how many hits"},
                "query": {"type": "string", "description": "what to find"},
                "scope": {"type": "string", "enum": ["docs", "code"]}},
            "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the project.", "parameters": {
            "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]


def _call(n: int, name: str, args: dict) -> dict:     # ids of 9 characters: Mistral's rule
    return {"id": f"call0000{n}", "type": "function", "function": {"name": name, "arguments": args}}


def _result(n: int, name: str, text: str) -> dict:
    return {"role": "tool", "tool_call_id": f"call0000{n}", "name": name, "content": text}


TOOL_PROBES = [      # (messages, tools): a call and its result; two calls; a later turn; no call
    ([{"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Find the docs on Vox closures."},
      {"role": "assistant", "content": "", "tool_calls": [
          _call(1, "search", {"limit": 3, "query": "vox closures", "scope": "docs"})]},
      _result(1, "search", '["docs/closures.md", "docs/fn.md"]')], TOOLS),
    ([{"role": "user", "content": "Search for let, then read the README."},
      {"role": "assistant", "content": "Two lookups.", "tool_calls": [
          _call(1, "search", {"query": "let"}), _call(2, "read_file", {"path": "README.md"})]},
      _result(1, "search", "docs/let.md"), _result(2, "read_file", "Vox is a toy language.")],
     TOOLS),
    ([{"role": "system", "content": "S"}, {"role": "user", "content": "Read a.vox"},
      {"role": "assistant", "content": "", "tool_calls": [
          _call(1, "read_file", {"path": "a.vox"})]},
      _result(1, "read_file", "let x = 1;"),
      {"role": "assistant", "content": "It binds x to 1."}, {"role": "user", "content": "thanks"}],
     TOOLS),
    ([{"role": "user", "content": "hi"}], TOOLS),
]
TOOL_NOTE = ("Ollama hands a TEMPLATE tool schemas and call arguments as it parsed them: keys in "
             "sorted order, schema keys it has no field for (default, minimum, format, "
             "additionalProperties, …) dropped, and `<`, `>`, `&` in strings written as \\u003c "
             "…; a request unlike that is framed differently than the chat template (and "
             "llama.cpp's --jinja, which renders the GGUF's own template) frames it.")


def tool_syntax(tok) -> str | None:
    """The tool-call syntax the tokenizer's chat template writes (None: it renders no tools)."""
    from mens.data.tool_syntax import syntax_of

    t = tok.chat_template
    if isinstance(t, dict):
        t = t.get("tool_use") or t.get("default") or ""
    return syntax_of(t) if t else None


def hermes_reference(hf_dir: Path):
    """The chat text a run trained with data.tool_format=hermes saw: mens's own rendering
    (mens.data.template: schemas in the system turn, <tool_call> blocks, <tool_response> turns),
    not the tool-less template's; for the tool probes of such a run's TEMPLATE."""
    from mens.data.template import ChatTemplate
    ct = ChatTemplate.load(hf_dir, tool_format="hermes")
    return lambda msgs, tools: ct.prompt_text(msgs, tools=tools)


def modelfile_plan(hf_dir: Path | None, tool_format: str = "native"
                   ) -> tuple[str | None, list[str], list[str]]:
    """(TEMPLATE or None, stop strings, notes) for the model in hf_dir: the first Go template of
    the chat formats (the family's own first) that renders like the tokenizer's chat template —
    with tools when the chat template renders tools (or the run wrote them as Hermes text,
    tool_format=hermes), without `.Tools` when it renders none."""
    if hf_dir is None:
        return CHATML_GO, list(STOPS), []
    from transformers import AutoTokenizer

    from mens.export import arch
    tok = AutoTokenizer.from_pretrained(str(hf_dir))
    vocab = tok.get_vocab()
    fam = FAMILIES.get(arch.load_config(hf_dir).get("model_type"))
    own = fam.chat if fam else None        # a family whose format mens has no template for: None
    order = ([own] if own else []) + [f for f in FORMATS if f != own]
    hermes = tool_format == "hermes" and bool(tok.chat_template)
    syntax = "hermes" if hermes else tool_syntax(tok) if tok.chat_template else None
    ref = hermes_reference(hf_dir) if hermes else None
    gos = [(go, FORMATS[f][1]) for f in order for go in FORMATS[f][0]] if tok.chat_template else []
    if syntax:        # the model writes calls: a TEMPLATE must render the tool probes too
        for go, stops in [g for g in gos if ".Tools" in g[0]]:
            if not template_mismatches(go, tok, reference=ref):
                how = "mens rendered them in training (data.tool_format=hermes)" if hermes \
                    else "the chat template does"
                return go, [s for s in stops if s in vocab], [
                    f"Modelfile: TEMPLATE renders tools and {syntax} tool calls as {how} "
                    f"(probed). {TOOL_NOTE}"]
    for go, stops in [g for g in gos if ".Tools" not in g[0]]:
        if not template_mismatches(go, tok, tools=False):
            return go, [s for s in stops if s in vocab], [_no_tools(hf_dir, syntax, hermes)]
    stops = [s for s in (tok.eos_token,) if s]
    why = "it has no chat template" if not tok.chat_template else \
        f"its chat template renders like none of mens's Go templates ({', '.join(FORMATS)})"
    return None, stops, [f"Modelfile: no TEMPLATE for {hf_dir.name}: {why}; Ollama will use "
                         f"its default, so chat prompts may be framed differently than in "
                         f"training. Add a TEMPLATE by hand if you serve it with Ollama."]


def summary(hf_dir: Path, template: str | None, tool_format: str = "native") -> dict:
    """For export.json: the chat template the GGUF carries (its sha256 and tool syntax) and the
    Modelfile's TEMPLATE (by name) and whether it renders tools."""
    import hashlib
    import json

    from transformers import AutoTokenizer

    from mens.export.gguf import gguf_chat_template
    from mens.export.ollama_templates import TEMPLATES
    tok = AutoTokenizer.from_pretrained(str(hf_dir))
    t = gguf_chat_template(tok)
    text = t if isinstance(t, str) or t is None else json.dumps(t)
    return {"chat_template_sha256": hashlib.sha256(text.encode()).hexdigest() if text else None,
            "tool_syntax": tool_syntax(tok) if t else None, "trained_tool_format": tool_format,
            "ollama_template": next((n for n, g in TEMPLATES.items() if g == template), None),
            "ollama_tools": bool(template and ".Tools" in template)}


def _no_tools(hf_dir: Path, syntax: str | None, hermes: bool = False) -> str:
    if hermes:
        return (f"Modelfile: TOOLS NOT RENDERED: the run wrote tool calls as Hermes text "
                f"(data.tool_format=hermes) into {hf_dir.name}'s tool-less chat format, and no Go "
                f"template of mens renders that format with Hermes tools, so TEMPLATE has no "
                f".Tools and Ollama refuses requests with tools; llama.cpp's --jinja renders "
                f"the GGUF's tool-less template, so tools reach it only through `mens serve`.")
    if syntax is None:
        return (f"Modelfile: {hf_dir.name}'s chat template renders no tools, so TEMPLATE has no "
                f".Tools and Ollama refuses requests with tools for it (\"does not support "
                f"tools\"); tools reach it only as text in messages.")
    return (f"Modelfile: TOOLS NOT RENDERED: {hf_dir.name}'s chat template writes {syntax} tool "
            f"calls, but no Go template of mens renders them like it does, so TEMPLATE has no "
            f".Tools and Ollama refuses requests with tools (recent Ollama may use the GGUF's own "
            f"chat template instead). Serve tools with `mens serve` or llama.cpp's "
            f"`llama-server --jinja` (the GGUF keeps the template).")


def modelfile_text(from_file: str, adapter_file: str | None, source: str,
                   hf_dir: Path | None = None, tool_format: str = "native") -> str:
    """The Modelfile; `hf_dir` (the base model dir) picks the chat format (ChatML without it)."""
    template, stops, notes = modelfile_plan(Path(hf_dir) if hf_dir else None, tool_format)
    lines = [f"# Ollama Modelfile written by `python -m mens.export` for {source}.",
             "# Create the model: ollama create <name> -f Modelfile   (run in this directory)"]
    lines += [f"# NOTE: {n}" for n in notes]
    lines.append(f"FROM ./{from_file}")
    if adapter_file:
        lines.append(f"ADAPTER ./{adapter_file}")
    if template is not None:
        if '"""' in template:   # Ollama's parser would end the TEMPLATE there
            raise ValueError('a TEMPLATE holding """ cannot be written into a Modelfile')
        lines.append(f'TEMPLATE """{template}"""')
    lines += [f'PARAMETER stop "{s}"' for s in stops]
    return "\n".join(lines) + "\n"


def parse_modelfile(text: str) -> dict:
    """Instructions of a Modelfile: {'FROM': [..], 'ADAPTER': [..], 'TEMPLATE': [..],
    'PARAMETER': [(name, value), ..]}; triple-quoted values may span lines."""
    out: dict = {}
    for m in re.finditer(r'^(\w+)[ \t]+("""(.*?)"""|[^\n]*)', text, re.M | re.S):
        if m.group(0).lstrip().startswith("#"):
            continue
        op, value = m.group(1).upper(), m.group(3) if m.group(3) is not None else m.group(2).strip()
        if op == "PARAMETER":
            name, _, v = value.partition(" ")
            value = (name, v.strip().strip('"'))
        out.setdefault(op, []).append(value)
    return out


def render_go(template: str, messages: list[dict], tools: list[dict] | None = None) -> str:
    """TEMPLATE rendered for an OpenAI chat request, as Ollama would render it (GoTemplateError
    for a construct mens's Go subset does not know)."""
    return render(template, ollama.values(messages, tools))


def template_mismatches(template: str, tokenizer, tools: bool | None = None,
                        reference=None) -> list[str]:
    """Probe conversations where TEMPLATE and the tokenizer's chat template render differently
    (a probe the chat template itself refuses, e.g. a system turn, is skipped). tools: the tool
    probes only (True), the plain ones only (False), or both when the chat template renders
    tools (None). A TEMPLATE the checker cannot read is one mismatch naming the construct.
    reference(messages, tools): the text to match for the tool probes, when not the chat
    template's (hermes_reference)."""
    bad = []
    bos = getattr(tokenizer, "bos_token", None)
    if tools is None:
        tools = None if reference or tool_syntax(tokenizer) else False
    probes = ([] if tools else [(m, None) for m in PROBES]) + \
        (TOOL_PROBES if tools in (True, None) else [])
    for msgs, tl in probes:
        try:
            want = reference(msgs, tl) if reference and tl else tokenizer.apply_chat_template(
                msgs, tools=tl, tokenize=False, add_generation_prompt=True)
        except Exception:     # noqa: BLE001 — jinja's raise_exception: a format without it
            continue
        if bos and want.startswith(bos):
            want = want[len(bos):]          # Ollama adds BOS at tokenization
        try:
            got = render_go(template, msgs, tl)
        except GoTemplateError as e:
            return [f"TEMPLATE cannot be checked: {e}"]
        if got != want:
            what = f"{len(msgs)}-message {'tool ' if tl else ''}probe"
            bad.append(f"{what}: chat template {want!r} vs TEMPLATE {got!r}")
    return bad


def check_modelfile(path: Path, tokenizer, reference=None) -> dict:
    """Parse a written Modelfile back and check it: files exist, TEMPLATE renders like the chat
    template (the tool probes too when it has `.Tools` and the chat template renders tools), the
    stop tokens are the tokenizer's end tokens."""
    parsed = parse_modelfile(path.read_text())
    files = [*parsed.get("FROM", []), *parsed.get("ADAPTER", [])]
    missing = [f for f in files if not (path.parent / f).is_file()]
    stops = [v for k, v in parsed.get("PARAMETER", []) if k == "stop"]
    template = (parsed.get("TEMPLATE") or [None])[0]
    return {"from": parsed.get("FROM"), "adapter": parsed.get("ADAPTER"), "missing_files": missing,
            "template": template is not None,
            "tools": bool(template and ".Tools" in template),
            "template_mismatches": template_mismatches(
                template, tokenizer, tools=None if ".Tools" in template else False,
                reference=reference)
            if template else [],
            "stops": stops, "stops_are_tokens": all(s in tokenizer.get_vocab() for s in stops)}
