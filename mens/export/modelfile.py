"""Ollama Modelfile: write it, read it back, and check its TEMPLATE against the chat template.

Ollama's TEMPLATE is a Go template; the model's chat template is Jinja. mens writes the ChatML
Go template (Qwen3's framing) and proves the two agree by rendering both for probe conversations:
the Go side through a translation of the few constructs it uses into Jinja (`range`/`end`,
`.Role`/`.Content`, `{{-` trimming). Ollama itself cannot run here, so this is the check we have.
"""
from __future__ import annotations

import re
from pathlib import Path

CHATML_GO = ("{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n"
             "{{ end }}<|im_start|>assistant\n")
STOPS = ("<|im_end|>", "<|endoftext|>")
PROBES = [
    [{"role": "user", "content": "Write a Vox function that adds two numbers."}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"},
     {"role": "assistant", "content": "hello"}, {"role": "user", "content": "fix: let x = ;"}],
]


def modelfile_text(from_file: str, adapter_file: str | None, source: str) -> str:
    lines = [f"# Ollama Modelfile written by `python -m mens.export` for {source}.",
             "# Create the model: ollama create <name> -f Modelfile   (run in this directory)",
             f"FROM ./{from_file}"]
    if adapter_file:
        lines.append(f"ADAPTER ./{adapter_file}")
    lines.append(f'TEMPLATE """{CHATML_GO}"""')
    lines += [f'PARAMETER stop "{s}"' for s in STOPS]
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


def render_go(template: str, messages: list[dict]) -> str:
    """Render the Go-template subset Ollama's ChatML templates use, via Jinja."""
    import jinja2

    j = re.sub(r"\{\{(-?)\s*range \.Messages\s*(-?)\}\}", r"{%\1 for m in Messages \2%}", template)
    j = re.sub(r"\{\{(-?)\s*end\s*(-?)\}\}", r"{%\1 endfor \2%}", j)
    j = re.sub(r"\{\{(-?)\s*\.(Role|Content)\s*(-?)\}\}", lambda m:
               f"{{{{{m.group(1)} m.{m.group(2).lower()} {m.group(3)}}}}}", j)
    left = [x for x in re.findall(r"\{\{-?\s*(.*?)\s*-?\}\}", j)
            if x not in ("m.role", "m.content")]
    if left:
        raise ValueError(f"TEMPLATE uses Go constructs beyond range/.Role/.Content: {left}")
    return jinja2.Environment(keep_trailing_newline=True).from_string(j).render(Messages=messages)


def template_mismatches(template: str, tokenizer) -> list[str]:
    """Probe conversations where TEMPLATE and the tokenizer's chat template render differently."""
    bad = []
    for msgs in PROBES:
        want = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
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
    return {"from": parsed.get("FROM"), "adapter": parsed.get("ADAPTER"), "missing_files": missing,
            "template_mismatches": template_mismatches(parsed["TEMPLATE"][0], tokenizer),
            "stops": stops, "stops_are_tokens": all(s in tokenizer.get_vocab() for s in stops)}
