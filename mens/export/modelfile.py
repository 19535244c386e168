"""Ollama Modelfile: write it, read it back, and check its TEMPLATE against the chat template.

Ollama's TEMPLATE is a Go template; the model's chat template is Jinja. mens has one Go template
per chat format (ChatML, Llama 3, Gemma, Mistral [INST]) and proves the one it writes agrees with
the tokenizer's chat template by rendering both for probe conversations: the Go side through a
translation of the few constructs it uses into Jinja (`range`, `if`/`else if`/`else`/`end`,
`eq`/`and`/`not`/`index`, `.Role`/`.Content`, `{{-` trimming). Ollama itself cannot run here, so
this is the check we have. When no template of the family renders like the chat template, the
Modelfile is written without TEMPLATE and says why (and `modelfile_plan` returns the note for the
export manifest): Ollama then falls back to the GGUF's own chat template handling.

The BOS token: Ollama (like llama.cpp) adds it when tokenizing the rendered prompt, so a chat
template's leading `bos_token` is not part of TEMPLATE and is dropped before comparing.
"""
from __future__ import annotations

import re
from pathlib import Path

from mens.source.families import FAMILIES

CHATML_GO = ("{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n"
             "{{ end }}<|im_start|>assistant\n")
LLAMA3_GO = ("{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n"
             "{{ .Content }}<|eot_id|>{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n")
# Gemma has no system turn: its chat template folds a leading system message into the first
# user turn ("<start_of_turn>user\n" + system + "\n\n" + user), and calls the assistant "model".
_FOLDED = '(and (eq $i 1) (eq (index $.Messages 0).Role "system"))'
GEMMA_GO = ("{{- range $i, $m := .Messages }}{{ if eq .Role \"system\" }}<start_of_turn>user\n"
            "{{ .Content }}\n\n{{ else }}{{ if not " + _FOLDED + " }}<start_of_turn>"
            "{{ if eq .Role \"assistant\" }}model{{ else }}{{ .Role }}{{ end }}\n{{ end }}"
            "{{ .Content }}<end_of_turn>\n{{ end }}{{ end }}<start_of_turn>model\n")
# Mistral [INST]: a leading system message prefixes the first user message.
MISTRAL_GO = ("{{- range $i, $m := .Messages }}{{ if eq .Role \"system\" }}[INST] {{ .Content }}"
              "\n\n{{ else if eq .Role \"user\" }}{{ if not " + _FOLDED + " }}[INST] {{ end }}"
              "{{ .Content }}[/INST]{{ else }}{{ .Content }}</s>{{ end }}{{ end }}")
FORMATS = {"chatml": (CHATML_GO, ("<|im_end|>", "<|endoftext|>")),
           "llama3": (LLAMA3_GO, ("<|eot_id|>", "<|end_of_text|>")),
           "gemma": (GEMMA_GO, ("<end_of_turn>",)),
           "mistral": (MISTRAL_GO, ("</s>",))}
STOPS = FORMATS["chatml"][1]
PROBES = [
    [{"role": "user", "content": "Write a Vox function that adds two numbers."}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"},
     {"role": "assistant", "content": "hello"}, {"role": "user", "content": "fix: let x = ;"}],
    [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
     {"role": "user", "content": "three"}],
]


def modelfile_plan(hf_dir: Path | None) -> tuple[str | None, list[str], list[str]]:
    """(TEMPLATE or None, stop strings, notes) for the model in hf_dir: the first chat format's
    Go template (the family's own first) that renders like the tokenizer's chat template."""
    if hf_dir is None:
        return CHATML_GO, list(STOPS), []
    from transformers import AutoTokenizer

    from mens.export import arch
    tok = AutoTokenizer.from_pretrained(str(hf_dir))
    vocab = tok.get_vocab()
    fam = FAMILIES.get(arch.load_config(hf_dir).get("model_type"))
    own = fam.chat if fam else None        # a family whose format mens has no template for: None
    order = ([own] if own else []) + [f for f in FORMATS if f != own]
    if tok.chat_template:
        for fmt in order:
            go, stops = FORMATS[fmt]
            if not template_mismatches(go, tok):
                return go, [s for s in stops if s in vocab], []
    stops = [s for s in (tok.eos_token,) if s]
    why = "it has no chat template" if not tok.chat_template else \
        f"its chat template renders like none of mens's Go templates ({', '.join(FORMATS)})"
    return None, stops, [f"Modelfile: no TEMPLATE for {hf_dir.name}: {why}; Ollama will use "
                         f"its default, so chat prompts may be framed differently than in "
                         f"training. Add a TEMPLATE by hand if you serve it with Ollama."]


def modelfile_text(from_file: str, adapter_file: str | None, source: str,
                   hf_dir: Path | None = None) -> str:
    """The Modelfile; `hf_dir` (the base model dir) picks the chat format (ChatML without it)."""
    template, stops, notes = modelfile_plan(Path(hf_dir) if hf_dir else None)
    lines = [f"# Ollama Modelfile written by `python -m mens.export` for {source}.",
             "# Create the model: ollama create <name> -f Modelfile   (run in this directory)"]
    lines += [f"# NOTE: {n}" for n in notes]
    lines.append(f"FROM ./{from_file}")
    if adapter_file:
        lines.append(f"ADAPTER ./{adapter_file}")
    if template is not None:
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


def _go_expr(text: str) -> str:
    """A Go template pipeline of the supported subset as a Jinja expression."""
    toks = re.findall(r'\(|\)|"[^"]*"|[^\s()]+', text)
    pos = 0

    def term() -> str:
        nonlocal pos
        t = toks[pos]
        pos += 1
        if t == "(":
            e = call()
            pos += 1                                   # ")"
            if pos < len(toks) and toks[pos].startswith("."):   # (index ...).Role
                e, pos = f"({e}){toks[pos].lower()}", pos + 1
            return e
        if t in (".Role", ".Content"):
            return f"m.{t[1:].lower()}"
        if t == "$i":
            return "loop.index0"
        if t == "$.Messages":
            return "Messages"
        if t.startswith('"') or t.isdigit():
            return t
        raise ValueError(f"TEMPLATE uses a Go construct mens does not check: {t!r}")

    def call() -> str:
        nonlocal pos
        f = toks[pos]
        if f in ("eq", "and", "or", "not", "index"):
            pos += 1
            args = []
            while pos < len(toks) and toks[pos] != ")":
                args.append(term())
            if f == "eq":
                return f"({args[0]} == {args[1]})"
            if f == "not":
                return f"(not {args[0]})"
            if f == "index":
                return f"{args[0]}[{args[1]}]"
            return "(" + f" {f} ".join(args) + ")"
        return term()

    return call()


def render_go(template: str, messages: list[dict]) -> str:
    """Render the Go-template subset of mens's TEMPLATEs via Jinja."""
    import jinja2

    out, stack, last = [], [], 0
    for a in re.finditer(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", template, re.S):
        out.append(template[last:a.start()].replace("{", "{{ '{' }}"))
        last = a.end()
        lt, body, rt = a.group(1), a.group(2), a.group(3)
        if re.fullmatch(r"range (?:\$i, \$m := )?\.Messages", body):
            stack.append("for")
            j = "{%" + lt + " for m in Messages " + rt + "%}"
        elif body.startswith("if "):
            stack.append("if")
            j = "{%" + lt + f" if {_go_expr(body[3:])} " + rt + "%}"
        elif body.startswith("else if "):
            j = "{%" + lt + f" elif {_go_expr(body[8:])} " + rt + "%}"
        elif body == "else":
            j = "{%" + lt + " else " + rt + "%}"
        elif body == "end":
            j = "{%" + lt + f" end{stack.pop()} " + rt + "%}"
        else:
            j = "{{" + lt + f" {_go_expr(body)} " + rt + "}}"
        out.append(j)
    out.append(template[last:])
    env = jinja2.Environment(keep_trailing_newline=True)
    return env.from_string("".join(out)).render(Messages=messages)


def template_mismatches(template: str, tokenizer) -> list[str]:
    """Probe conversations where TEMPLATE and the tokenizer's chat template render differently
    (a probe the chat template itself refuses, e.g. a system turn, is skipped)."""
    bad = []
    bos = getattr(tokenizer, "bos_token", None)
    for msgs in PROBES:
        try:
            want = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        except Exception:     # noqa: BLE001 — jinja's raise_exception: a format without it
            continue
        if bos and want.startswith(bos):
            want = want[len(bos):]          # Ollama adds BOS at tokenization
        got = render_go(template, msgs)
        if got != want:
            bad.append(f"{len(msgs)}-message probe: chat template {want!r} vs TEMPLATE {got!r}")
    return bad


def check_modelfile(path: Path, tokenizer) -> dict:
    """Parse a written Modelfile back and check it: files exist, TEMPLATE renders like the chat
    template, the stop tokens are the tokenizer's end tokens."""
    parsed = parse_modelfile(path.read_text())
    files = [*parsed.get("FROM", []), *parsed.get("ADAPTER", [])]
    missing = [f for f in files if not (path.parent / f).is_file()]
    stops = [v for k, v in parsed.get("PARAMETER", []) if k == "stop"]
    template = (parsed.get("TEMPLATE") or [None])[0]
    return {"from": parsed.get("FROM"), "adapter": parsed.get("ADAPTER"), "missing_files": missing,
            "template": template is not None,
            "template_mismatches": template_mismatches(template, tokenizer) if template else [],
            "stops": stops, "stops_are_tokens": all(s in tokenizer.get_vocab() for s in stops)}
