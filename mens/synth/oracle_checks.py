"""The admission checks' logic: each `CHECKS[name](record)` returns the list of problems it
found, exact and located (an empty list: the record passes). It only parses and validates —
nothing in a record is ever run. mens.synth.oracle runs these functions in a limited child
process (`python -m mens.synth.oracle_checks JOB`) for model output; mens.synth.admission calls
them in-process for mens's own template corpora. bash and cargo, the two checks that need an
outside tool, are run by mens.synth.oracle; what of them is pure Python (is there a block at
all, do the ```toml blocks parse) lives here too.

Every check looks only at the assistant side (for preference pairs: `chosen`), because that is
what the model learns to produce; broken code in a user prompt is intended. An answer holding
nothing checkable fails: an empty answer is no evidence.

The tool-call checks (tool_call_schema, transcript_structure) live in mens.synth.tool_checks.
"""
from __future__ import annotations

import ast
import json
import re
import sys
import tomllib
from typing import Callable

import yaml

from mens.data import formats
from mens.data import tool_syntax as TS
from mens.synth.tool_checks import (TOOL_CALL, TOOLS, declared_tools,  # noqa: F401 (re-exported)
                                    schema_errors, tool_call_schema, tool_calls,
                                    transcript_structure, turn_calls)
from mens.synth.vox import VoxError, vox_check

LANG = re.compile(r"[\w+-]*")
SKILL_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
SHELL_LANGS = ("bash", "sh", "shell")


def fences(text: str) -> list[tuple[str, str]]:
    """(lang, body) of every ``` fence, exactly what
    re.findall(r"```([\\w+-]*)[^\\n]*\\n(.*?)```", text, re.S) returns, in linear time: that
    regex backtracks quadratically on a line of many ``` with no newline after them, and the
    parent process extracts blocks with this before any child runs."""
    out, i = [], 0
    while (start := text.find("```", i)) >= 0:
        lang = LANG.match(text, start + 3).group()
        nl = text.find("\n", start + 3 + len(lang))
        end = text.find("```", nl + 1) if nl >= 0 else -1
        if end < 0:          # no later opening can close either: the regex finds nothing more
            break
        out.append((lang, text[nl + 1:end]))
        i = end + 3
    return out


def answers(record: dict) -> list[str]:
    msgs = formats.answers(record)
    return [m.get("content") or "" for m in msgs if m.get("role") == "assistant"]


def blocks(record: dict, *langs: str) -> list[str]:
    return [body for text in answers(record) for lang, body in fences(text) if lang in langs]


# ---------------------------------------------------------------- mesh messages, SKILL.md
def mesh_messages(rec: dict) -> list[str]:
    """Each ```json block an assistant writes is a message or a list of messages with `id`,
    `sender`, non-empty `recipients`, and `reply_to` naming an earlier message (from any turn)
    or null; ids unique; following reply_to never loops. Messages quoted in user turns are
    input (possibly malformed on purpose): their ids count as earlier, nothing more."""
    seen: dict[str, str | None] = {}
    written: list[str] = []
    for n, m in enumerate(formats.chat(rec), 1):
        for lang, body in fences(m.get("content") or ""):
            if lang != "json":
                continue
            try:
                data = json.loads(body)
            except json.JSONDecodeError as e:
                if m.get("role") == "assistant":
                    return [f"message {n}: ```json block is not JSON: {e}"]
                continue
            for msg in data if isinstance(data, list) else [data]:
                if m.get("role") != "assistant":
                    if isinstance(msg, dict) and isinstance(msg.get("id"), str):
                        parent = msg.get("reply_to")
                        seen.setdefault(msg["id"], parent if isinstance(parent, str) else None)
                    continue
                if not (isinstance(msg, dict) and isinstance(msg.get("id"), str)
                        and isinstance(msg.get("sender"), str)
                        and isinstance(msg.get("recipients"), list) and msg["recipients"]
                        and all(isinstance(r, str) for r in msg["recipients"])):
                    return [f"message {n}: {json.dumps(msg)[:200]} needs a string `id`, a string "
                            f"`sender` and a non-empty list of string `recipients`"]
                parent = msg.get("reply_to")
                if msg["id"] in seen:
                    return [f"message {n}: id `{msg['id']}` is used twice"]
                if parent is not None and parent not in seen:
                    return [f"message {n}: `{msg['id']}` replies to `{parent}`, which no earlier "
                            f"message has as its id"]
                seen[msg["id"]] = parent
                written.append(msg["id"])
    for start in written:                   # acyclic, checked outright rather than assumed
        node, steps = start, 0
        while node is not None and steps <= len(seen):
            node, steps = seen.get(node), steps + 1
        if node is not None:
            return [f"the reply_to chain from `{start}` loops"]
    return [] if written else ["no ```json message written by the assistant"]


def skill_frontmatter(rec: dict) -> list[str]:
    """The SKILL.md in the answer opens with `---` YAML front matter holding a kebab-case
    `name` (≤64 chars) and a non-empty `description` (≤1024 chars)."""
    docs = [b for b in blocks(rec, "markdown", "md") if b.startswith("---")]
    docs += [t for t in answers(rec) if t.startswith("---")]
    if not docs:
        return ["no SKILL.md opening with `---` front matter in the answer"]
    problems = []
    for k, doc in enumerate(docs, 1):
        head, sep, _ = doc.partition("\n---")
        if not sep:
            problems.append(f"SKILL.md {k}: the front matter is never closed by a `---` line")
            continue
        try:     # parsed from the rest of line 1 on: YAML's line numbers are the file's
            meta = yaml.safe_load(head[3:])
        except yaml.YAMLError as e:
            problems.append(f"SKILL.md {k}: " + str(e).replace('"<unicode string>"', "SKILL.md"))
            continue
        if not isinstance(meta, dict):
            problems.append(f"SKILL.md {k}: the front matter is not a mapping")
            continue
        name, desc = meta.get("name"), meta.get("description")
        if not (isinstance(name, str) and SKILL_NAME.match(name) and len(name) <= 64):
            problems.append(f"SKILL.md {k}: `name` must be kebab-case, at most 64 characters "
                            f"(got {json.dumps(name, default=str)[:100]})")
        if not (isinstance(desc, str) and 0 < len(desc.strip()) <= 1024):
            problems.append(f"SKILL.md {k}: `description` must be a non-empty string of at most "
                            f"1024 characters (a YAML mapping or list here usually means an "
                            f"unquoted `: `)")
    return problems


# ---------------------------------------------------------------- parsers
def empty(lang: str, bodies: list[str]) -> list[str]:
    """An empty fence parses under every grammar, so it proves nothing: a problem. (A model in a
    loop writing ```vox fences and nothing else otherwise passes every check — issue #27.)"""
    return [f"{lang} block {k}: empty (no code)" for k, b in enumerate(bodies, 1) if not b.strip()]


def vox_parses(rec: dict) -> list[str]:
    progs = blocks(rec, "vox")
    problems = empty("vox", progs)
    for k, prog in enumerate(progs, 1):
        try:
            vox_check(prog)
        except VoxError as e:                 # `error[V003] 4:12: expected …`: code, line, col
            problems.append(f"vox block {k}: {e}")
    return problems if progs else ["no ```vox block in the answer"]


def python_parses(rec: dict) -> list[str]:
    code = blocks(rec, "python", "py")
    problems = empty("python", code)
    for k, src in enumerate(code, 1):
        try:
            ast.parse(src)
        except SyntaxError as e:
            text = f"\n    {e.text.strip()[:200]}" if e.text else ""
            problems.append(f"python block {k}: line {e.lineno}, column {e.offset}: {e.msg}{text}")
        except ValueError as e:               # e.g. a NUL byte in the source
            problems.append(f"python block {k}: {e}")
    return problems if code else ["no ```python block in the answer"]


def rust_pure(rec: dict) -> list[str]:
    """rust_compiles' part without cargo: ```toml blocks parse; there is a rust or toml block."""
    problems = []
    for k, text in enumerate(blocks(rec, "toml"), 1):
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:   # "Expected ']' … (at line 1, column 11)"
            problems.append(f"toml block {k}: {e}")
    return problems if problems or blocks(rec, "rust", "toml") else [
        "no ```rust or ```toml block in the answer"]


# ---------------------------------------------------------------- arithmetic (issue #39)
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
EXPR = re.compile(r"(\d{1,6}) ([+*-]) (\d{1,6})")      # mens.synth.arith's `a op b`


def answer_tag(text: str) -> str | None:
    """The first closed <answer>…</answer>'s body, stripped (None: no closed tag), by
    str.find: linear on any model text."""
    start = text.find(ANSWER_OPEN)
    end = text.find(ANSWER_CLOSE, start + len(ANSWER_OPEN)) if start >= 0 else -1
    return text[start + len(ANSWER_OPEN):end].strip() if end >= 0 else None


def _question(rec: dict) -> str:
    users = [m.get("content") or "" for m in formats.chat(rec) if m.get("role") == "user"]
    return users[-1] if users else ""


def arith_answer(rec: dict) -> list[str]:
    """The answer's first <answer>…</answer> is exactly the value of the one `a op b` in the
    last user turn (recomputed here, so a record needs no reference key)."""
    found = EXPR.findall(_question(rec))
    if len(found) != 1:
        return [f"the question holds {len(found)} `a op b` expressions, not one"]
    a, op, b = found[0]
    want = str({"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op])
    texts = answers(rec)
    got = answer_tag(texts[-1]) if texts else None
    if got is None:
        return ["no closed <answer>…</answer> in the answer"]
    return [] if got == want else [f"<answer>{got[:50]}</answer> is not {a} {op} {b} = {want}"]


def answer_first(rec: dict) -> list[str]:
    """The bandit of the RL sanity check (tests/rl/): the answer starts with `<answer>`,
    right or wrong. A fixed-string reward, for checking that GRPO learns at all."""
    texts = answers(rec)
    if texts and texts[-1].startswith(ANSWER_OPEN):
        return []
    return [f"the answer does not start with {ANSWER_OPEN}"]


def shell_pure(rec: dict) -> list[str]:
    found = blocks(rec, *SHELL_LANGS)
    return empty("bash", found) if found else ["no ```bash block in the answer"]


# The checks that read only what assistant turns write (fenced blocks, tool calls; the system
# prompt for declared tools): judging a model's answer to a multi-turn prompt, an evaluation
# gives them that answer alone, since the earlier assistant turns are the data's and their blocks
# would count for the model (mens.eval.indomain). The others read the whole exchange.
PER_ANSWER = frozenset({"vox_parses", "python_parses", "tool_call_schema", "skill_frontmatter",
                        "rust_compiles", "shell_syntax", "arith_answer", "answer_first"})

# Checks that need the earlier turns as context but must credit only the model's own answer: in an
# evaluation the earlier assistant turns become user turns — input, whose messages still count as
# earlier (reply_to may name them) — so the data's own messages no longer pass for the model.
CONTEXT_AS_INPUT = frozenset({"mesh_messages"})

CHECKS: dict[str, Callable[[dict], list[str]]] = {
    "vox_parses": vox_parses, "python_parses": python_parses,
    "tool_call_schema": tool_call_schema, "transcript_structure": transcript_structure,
    "mesh_messages": mesh_messages, "skill_frontmatter": skill_frontmatter,
    "rust_compiles": rust_pure, "shell_syntax": shell_pure,
    "arith_answer": arith_answer, "answer_first": answer_first,
}


def oracle_record(rec: dict, head: list[dict], text: str, check: str,
                  syntax: str | None = "hermes") -> dict:
    """The record with the model's answer as its assistant turn: what the oracle judges of a
    model's answer (mens.eval.indomain, mens.objective.rewards). A check of answers alone
    (PER_ANSWER) sees the system prompt, the last user turn
    and this answer: the earlier assistant turns of a multi-turn prompt are the data's, and their
    blocks must not pass (or fail) for the model; a check of the exchange that credits only the
    answer (CONTEXT_AS_INPUT) gets those turns as input. The record's `tools` stay with it.
    syntax: the tool-call syntax the model writes (mens.data.tool_syntax; the run's encoder's
    `tool_syntax`, "hermes" for the tiny rung and Qwen): the tool checks read the answer's calls
    in it (None: as Hermes blocks, the text form of a template without tools)."""
    if check in PER_ANSWER:
        head = [m for m in head[:-1] if m["role"] == "system"] + head[-1:]
    elif check in CONTEXT_AS_INPUT:
        head = [dict(m, role="user") if m["role"] == "assistant" else m for m in head]
    answer = {"role": "assistant", "content": text}
    if syntax is not None:
        if syntax not in TS.SYNTAXES:
            raise ValueError(f"unknown tool-call syntax {syntax!r}; known: {TS.SYNTAXES}")
        answer["tool_syntax"] = syntax
    return {**{key: v for key, v in rec.items() if key != "messages"},
            "messages": head + [answer]}


def worker(job_path: str) -> None:
    """The child: JOB is JSON {check, records, timeout_s, marker}. Prints `MARKER ready`, then
    one `MARKER ["problem", …]` line per record. Before each record its CPU limit is moved to
    what it has used plus timeout_s (SIGXCPU past it); the parent's wall clock is the backstop."""
    import resource
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    check, marker, budget = CHECKS[job["check"]], job["marker"], job["timeout_s"]
    __import__("jsonschema")          # loaded before `ready`: the clock then times the check
    print(marker, "ready", flush=True)
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    for rec in job["records"]:
        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(used.ru_utime + used.ru_stime + budget) + 1
        resource.setrlimit(resource.RLIMIT_CPU,
                           (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
        try:
            problems = check(rec)
        except MemoryError:
            problems = [f"the check exceeded its memory limit ({job['memory_mb']} MB)"]
        except RecursionError:
            problems = ["the input is nested too deeply for the checker (RecursionError)"]
        except Exception as e:  # noqa: BLE001 — a record the check cannot read fails, loudly
            problems = [f"the check could not read this record: {type(e).__name__}: {e}"]
        print(marker, json.dumps(problems), flush=True)


if __name__ == "__main__":
    worker(sys.argv[1])
