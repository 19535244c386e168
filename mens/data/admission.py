"""Admission checks: the gate every corpus record passes before it is written (tools/make_corpus.py).

`CHECKS[name](record) -> True | False | None`; None means the check's tool is missing here, so
the record is kept but counted *unverified* — never silently passed. Each check looks only at
the assistant side (for preference pairs: `chosen`), because that is what the model learns to
produce; broken code in a user prompt (a diagnostic to repair) is intended. A record whose
answer holds nothing checkable fails: an empty answer is no evidence.

Vox, the house scripting language, is defined by its reference parser in mens/vox.py (split
out to keep modules small); `vox_parses` is its admission check.
"""
from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path
from typing import Callable

import yaml

from mens.data.vox import VoxError, vox_check

FENCE = re.compile(r"```([\w+-]*)[^\n]*\n(.*?)```", re.S)
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
TOOLS = re.compile(r"<tools>\s*(.*?)\s*</tools>", re.S)
SKILL_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def answers(record: dict) -> list[str]:
    msgs = record.get("chosen") if "chosen" in record else record.get("messages", [])
    return [m["content"] for m in msgs if m.get("role") == "assistant"]


def blocks(record: dict, *langs: str) -> list[str]:
    return [body for text in answers(record) for lang, body in FENCE.findall(text) if lang in langs]


# ---------------------------------------------------------------- JSON schema (the subset tools use)
def schema_errors(value, schema: dict, at: str = "$") -> list[str]:
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    t, errs = schema.get("type"), []
    if t in ("integer", "number"):
        ok = isinstance(value, (int, float) if t == "number" else int) and not isinstance(value, bool)
    else:
        ok = t is None or isinstance(value, kinds[t])
    if not ok:
        return [f"{at}: expected {t}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errs.append(f"{at}: {value!r} not in {schema['enum']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < schema.get("minimum", value) or value > schema.get("maximum", value):
            errs.append(f"{at}: {value} out of range")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errs.append(f"{at}: shorter than {schema['minLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errs.append(f"{at}: does not match {schema['pattern']}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errs.append(f"{at}: fewer than {schema['minItems']} items")
        for i, v in enumerate(value):
            errs += schema_errors(v, schema.get("items", {}), f"{at}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        errs += [f"{at}: missing `{k}`" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k in props:
                errs += schema_errors(v, props[k], f"{at}.{k}")
            elif schema.get("additionalProperties", True) is False:
                errs.append(f"{at}: unexpected `{k}`")
    return errs


def tool_calls(text: str) -> list[dict]:
    """Every <tool_call> in a message as a dict; raises ValueError on one that is not JSON."""
    calls = [json.loads(c) for c in TOOL_CALL.findall(text)]
    for c in calls:
        if not (isinstance(c, dict) and isinstance(c.get("name"), str)
                and isinstance(c.get("arguments"), dict)):
            raise ValueError(f"malformed tool call {c!r}")
    return calls


# ---------------------------------------------------------------- the checks
def vox_parses(rec: dict) -> bool:
    progs = blocks(rec, "vox")
    try:
        return bool(progs) and all(vox_check(p) is not None for p in progs)
    except VoxError:
        return False


def python_parses(rec: dict) -> bool:
    code = blocks(rec, "python", "py")
    try:
        return bool(code) and all(ast.parse(c) is not None for c in code)
    except SyntaxError:
        return False


def check_shell_batch(records: list[dict]) -> list[bool | None]:
    """`bash -n` on every bash/sh block; one bash process checks all of them (fast)."""
    if not shutil.which("bash"):
        return [None] * len(records)
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i, rec in enumerate(records):
            for j, code in enumerate(blocks(rec, "bash", "sh", "shell")):
                f = Path(tmp) / f"r{i}_{j}.sh"
                f.write_text(code)
                files.append((i, f))
        script = "".join(f'bash -n "{f}" 2>/dev/null; echo $?\n' for _, f in files)
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300)
        codes = out.stdout.split()
    has = {i for i, _ in files}                    # no block at all: nothing checked, not admitted
    bad = {i for (i, _), c in zip(files, codes) if c != "0"}
    return [i in has and i not in bad for i in range(len(records))]


def check_rust_batch(records: list[dict], cargo: str | None = None) -> list[bool | None]:
    """All ```rust blocks in ONE scratch crate, one module file per block, `cargo check
    --offline` (no dependencies): seconds, not minutes. rustc may stop before borrow-checking
    when another module has a resolve error, so failing modules are removed and the crate is
    re-checked until it is clean: a module counts as passing only in a clean run.
    ```toml blocks must parse (tomllib). No cargo here → None for every record."""
    cargo = cargo or shutil.which("cargo") or next(
        (str(p) for p in [Path.home() / ".cargo/bin/cargo"] if p.exists()), None)
    ok: list[bool | None] = []
    for rec in records:
        try:
            [tomllib.loads(t) for t in blocks(rec, "toml")]
            ok.append(bool(blocks(rec, "rust", "toml")))
        except tomllib.TOMLDecodeError:
            ok.append(False)
    if not cargo:    # toml-only answers were fully checked; Rust ones cannot be here
        return [None if o and blocks(r, "rust") else o for o, r in zip(ok, records)]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "src")
        src.mkdir()
        Path(tmp, "Cargo.toml").write_text(
            '[package]\nname = "scratch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\n')
        mods = {}
        for i, rec in enumerate(records):
            for j, code in enumerate(blocks(rec, "rust")):
                name = f"m{i}_{j}"
                (src / f"{name}.rs").write_text(code)
                mods[name] = i
        live = set(mods)
        while live:
            (src / "lib.rs").write_text("#![allow(warnings)]\n" + "".join(
                f"mod {m};\n" for m in sorted(live)))
            run = subprocess.run([cargo, "check", "--offline", "--tests", "--quiet", "--message-format=json"],
                                 cwd=tmp, capture_output=True, text=True, timeout=600)
            if run.returncode == 0:
                break
            bad = set()
            for line in run.stdout.splitlines():
                msg = json.loads(line).get("message") if line.startswith("{") else None
                if msg and msg.get("level") == "error":
                    bad |= {Path(s["file_name"]).stem for s in msg.get("spans", [])} & live
            if not bad:   # an error we cannot place: refuse to guess which module is fine
                raise RuntimeError(f"cargo check failed outside any module:\n{run.stderr[-2000:]}")
            live -= bad
            for m in bad:
                ok[mods[m]] = False
    return ok


def shell_syntax(rec: dict) -> bool | None:
    return check_shell_batch([rec])[0]


def rust_compiles(rec: dict) -> bool | None:
    return check_rust_batch([rec])[0]


def declared_tools(rec: dict) -> dict[str, dict]:
    system = next((m["content"] for m in rec.get("messages", rec.get("prompt", []))
                   if m["role"] == "system"), "")
    found = TOOLS.search(system)
    tools = [json.loads(line) for line in found.group(1).splitlines() if line.strip()] if found else []
    return {t["name"]: t.get("parameters", {}) for t in tools}


def tool_call_schema(rec: dict) -> bool:
    """Every <tool_call> names a tool declared in the system prompt's <tools> block and its
    arguments validate against that tool's JSON schema; at least one call."""
    try:
        tools = declared_tools(rec)
        calls = [c for text in answers(rec) for c in tool_calls(text)]
    except (ValueError, KeyError, TypeError):
        return False
    return bool(calls) and all(c["name"] in tools and not schema_errors(c["arguments"],
                                                                        tools[c["name"]])
                               for c in calls)


def transcript_structure(rec: dict) -> bool:
    """system? then user; an assistant turn with N tool calls is followed by exactly N tool
    results, then an assistant turn; a user turn follows only a final (call-free) assistant
    turn; the transcript ends on a final assistant turn."""
    msgs = rec.get("messages", [])
    if msgs and msgs[0]["role"] == "system":
        msgs = msgs[1:]
    state, pending = "user", 0                       # state: the role the next message must have
    try:
        for m in msgs:
            role = m["role"]
            if pending:                              # results of the previous turn's calls
                if role != "tool":
                    return False
                pending -= 1
                state = "assistant" if pending == 0 else state
            elif state in ("user", "final") and role == "user":
                state = "assistant"
            elif state == "assistant" and role == "assistant":
                pending = len(tool_calls(m["content"]))
                state = "tool" if pending else "final"
            else:
                return False
    except ValueError:
        return False
    return state == "final"


def mesh_messages(rec: dict) -> bool:
    """Each ```json block an assistant writes is a message or a list of messages with `id`,
    `sender`, non-empty `recipients`, and `reply_to` naming an earlier message (from any turn)
    or null; ids unique; following reply_to never loops. Messages quoted in user turns are
    input (possibly malformed on purpose): their ids count as earlier, nothing more."""
    seen: dict[str, str | None] = {}
    written: list[str] = []
    for m in rec.get("messages", []):
        for lang, body in FENCE.findall(m["content"]):
            if lang != "json":
                continue
            try:
                data = json.loads(body)
            except json.JSONDecodeError:
                if m["role"] == "assistant":
                    return False
                continue
            for msg in data if isinstance(data, list) else [data]:
                if m["role"] != "assistant":
                    if isinstance(msg, dict) and isinstance(msg.get("id"), str):
                        parent = msg.get("reply_to")
                        seen.setdefault(msg["id"], parent if isinstance(parent, str) else None)
                    continue
                if not (isinstance(msg, dict) and isinstance(msg.get("id"), str)
                        and isinstance(msg.get("sender"), str)
                        and isinstance(msg.get("recipients"), list) and msg["recipients"]
                        and all(isinstance(r, str) for r in msg["recipients"])):
                    return False
                parent = msg.get("reply_to")
                if msg["id"] in seen or (parent is not None and parent not in seen):
                    return False
                seen[msg["id"]] = parent
                written.append(msg["id"])
    for start in written:                   # acyclic, checked outright rather than assumed
        node, steps = start, 0
        while node is not None and steps <= len(seen):
            node, steps = seen.get(node), steps + 1
        if node is not None:
            return False
    return bool(written)


def skill_frontmatter(rec: dict) -> bool:
    """The SKILL.md in the answer opens with `---` YAML front matter holding a kebab-case
    `name` (≤64 chars) and a non-empty `description` (≤1024 chars)."""
    docs = [b for b in blocks(rec, "markdown", "md") if b.startswith("---")]
    docs += [t for t in answers(rec) if t.startswith("---")]
    if not docs:
        return False
    for doc in docs:
        parts = doc.split("\n---", 1)
        if len(parts) < 2:
            return False
        try:
            meta = yaml.safe_load(parts[0][3:])
        except yaml.YAMLError:
            return False
        if not (isinstance(meta, dict) and isinstance(meta.get("name"), str)
                and SKILL_NAME.match(meta["name"]) and len(meta["name"]) <= 64
                and isinstance(meta.get("description"), str)
                and 0 < len(meta["description"].strip()) <= 1024):
            return False
    return True


CHECKS: dict[str, Callable[[dict], bool | None]] = {
    "vox_parses": vox_parses, "rust_compiles": rust_compiles, "shell_syntax": shell_syntax,
    "tool_call_schema": tool_call_schema, "transcript_structure": transcript_structure,
    "python_parses": python_parses, "mesh_messages": mesh_messages,
    "skill_frontmatter": skill_frontmatter,
}
# Checks that run many records in one tool invocation (the generator uses these).
BATCH: dict[str, Callable[[list[dict]], list[bool | None]]] = {
    "rust_compiles": check_rust_batch, "shell_syntax": check_shell_batch,
}


def check_all(name: str, records: list[dict]) -> list[bool | None]:
    if name not in CHECKS:
        raise KeyError(f"unknown admission check `{name}`; known: {', '.join(sorted(CHECKS))}")
    return BATCH[name](records) if name in BATCH else [CHECKS[name](r) for r in records]
