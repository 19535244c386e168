"""The tool-call admission checks (mens.synth.oracle_checks registers them, its child runs them):
`tool_call_schema` — every call names a declared tool and its arguments validate against that
tool's JSON schema (jsonschema) — and `transcript_structure` — calls and their results alternate
correctly. Each returns the list of problems found, exact and located ([] passes).

Tool use is read as a record holds it (issue #38): the tools it declares in `tools` (OpenAI's
form, mens.data.tools) and the calls of each assistant turn's `tool_calls`. Calls still written
as text are read as well — Hermes `<tool_call>` blocks in `content`, schemas in a `<tools>` block
of the system prompt (a user's or a teacher's record, mens's corpora before #38). A model's answer
is text in its family's syntax: oracle_checks.oracle_record marks the answer turn with it
(`tool_syntax`) and `turn_calls`, here in the sandboxed child, reads the calls out with
mens.data.tool_syntax — a parser never runs on model text in the parent.
"""
from __future__ import annotations

import functools
import json
import re

from mens.data import formats
from mens.data import tool_syntax as TS
from mens.data import tools as T

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
TOOLS = re.compile(r"<tools>\s*(.*?)\s*</tools>", re.S)


def schema_errors(value, schema, at: str = "$") -> list[str]:
    """`value` against a JSON Schema (the dialect its $schema names, else 2020-12), through the
    jsonschema library: one 'path: message' line per error, sorted by path."""
    validator, invalid = _validator(json.dumps(schema, sort_keys=True))
    if invalid:
        return [f"{at}: {invalid}"]
    errs = sorted(validator.iter_errors(value),
                  key=lambda e: ([str(p) for p in e.absolute_path], e.message))
    return [f"{at}{e.json_path[1:]}: {e.message}" for e in errs]


@functools.lru_cache(maxsize=256)    # a corpus declares a few schemas: check each once
def _validator(schema_json: str):
    from jsonschema import Draft202012Validator, SchemaError
    from jsonschema.validators import validator_for
    schema = json.loads(schema_json)
    cls = validator_for(schema, default=Draft202012Validator) if isinstance(schema, dict) \
        else Draft202012Validator
    try:
        cls.check_schema(schema)
    except SchemaError as e:
        where = "/".join(map(str, e.absolute_path)) or "(root)"
        return None, f"the schema itself is invalid at {where}: {e.message}"
    return cls(schema), None


def tool_calls(text: str) -> list[dict]:
    """Every <tool_call> in a message as a dict; raises ValueError naming the bad one."""
    calls = []
    for k, body in enumerate(TOOL_CALL.findall(text), 1):
        try:
            c = json.loads(body)
        except json.JSONDecodeError as e:
            raise ValueError(f"<tool_call> {k} is not JSON: {e}") from None
        if not (isinstance(c, dict) and isinstance(c.get("name"), str)
                and isinstance(c.get("arguments"), dict)):
            raise ValueError(f"<tool_call> {k} needs a string `name` and an object `arguments`, "
                             f"got {json.dumps(c)[:200]}")
        calls.append(c)
    return calls


def declared_tools(rec: dict) -> dict[str, dict]:
    """{name: parameters schema} of the tools a record declares: its `tools`, plus any in a
    <tools> block of its system prompt (the text form). Raises ValueError (or KeyError,
    TypeError) naming what does not parse."""
    system = next((m.get("content") or "" for m in formats.turns(rec)
                   if m.get("role") == "system"), "")
    found = TOOLS.search(system)
    lines = found.group(1).splitlines() if found else []
    tools = [json.loads(line) for line in lines if line.strip()]
    out = {t["name"]: t.get("parameters", {}) for t in tools}
    if rec.get("tools"):
        out |= {t["function"]["name"]: t["function"].get("parameters") or {}
                for t in T.normalize_tools(rec["tools"])}
    return out


def turn_calls(m: dict) -> list[dict]:
    """The calls an assistant turn makes, as {"name", "arguments", "id"?}: its structured
    `tool_calls`, then those its content writes as text — in `tool_syntax` for a model's answer
    (oracle_record), else as Hermes <tool_call> blocks. Raises ValueError naming a bad call."""
    calls = []
    for k, c in enumerate(m.get("tool_calls") or []):
        fn = T.normalize_call(c, f"tool_calls[{k}]", None)   # T.ToolError is a ValueError
        calls.append({**fn["function"], **({"id": fn["id"]} if "id" in fn else {})})
    syntax, text = m.get("tool_syntax") or "hermes", m.get("content") or ""
    if syntax == "hermes":          # the located diagnostics of tool_calls(), and every block
        found = tool_calls(text)    # closed (an unclosed one is not a call a server returns)
        if m.get("tool_syntax") and text.count("<tool_call>") != len(found):
            raise ValueError("a <tool_call> block is not closed")
        return calls + found
    parsed = TS.parse(text, syntax)
    if parsed.malformed:
        raise ValueError(f"the answer's tool call does not parse ({syntax} syntax): "
                         f"{parsed.malformed}")
    return calls + [{**c["function"], **({"id": c["id"]} if "id" in c else {})}
                    for c in parsed.calls]


def tool_call_schema(rec: dict) -> list[str]:
    """Every tool call names a tool the record declares (`tools`, or the system prompt's <tools>
    block) and its arguments validate against that tool's JSON schema; at least one call."""
    try:
        tools = declared_tools(rec)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        where = "`tools`" if rec.get("tools") else "system prompt: the <tools> block"
        return [f"{where} does not parse ({type(e).__name__}: {e})"]
    problems, n = [], 0
    turns = [m for m in formats.answers(rec) if m.get("role") == "assistant"]
    for turn, m in enumerate(turns, 1):
        try:
            calls = turn_calls(m)
        except ValueError as e:
            problems.append(f"assistant turn {turn}: {e}")
            continue
        for c in calls:
            n += 1
            name = c["name"]
            if name not in tools:
                problems.append(f"call {n} `{name}`: no such tool in <tools> (declared: "
                                f"{', '.join(sorted(tools)) or 'none'})")
            else:
                problems += [f"call {n} `{name}` arguments {e}"
                             for e in schema_errors(c["arguments"], tools[name])]
    return problems if n or problems else ["no tool call in the answer"]


def _answered(m: dict, pending: list[dict]) -> dict | None:
    """The open call a tool result answers: the one its `tool_call_id` names, else the first
    one its `name` names, else the next in order (a result written as text names none)."""
    if m.get("tool_call_id") is not None:
        return next((c for c in pending if c.get("id") == m["tool_call_id"]), None)
    if m.get("name") is not None:
        return next((c for c in pending if c["name"] == m["name"]), None)
    return pending[0]


def transcript_structure(rec: dict) -> list[str]:
    """system? then user; an assistant turn with N tool calls is followed by exactly N tool
    results, each answering one of those calls (by `tool_call_id` or `name` where it gives
    them), then an assistant turn; a user turn follows only a final (call-free) assistant turn;
    the transcript ends on a final assistant turn."""
    msgs = formats.chat(rec)
    skip = 1 if msgs and msgs[0].get("role") == "system" else 0
    state, pending = "user", []                      # state: the role the next message must have
    want = {"user": "a user turn", "final": "a user turn or the end", "assistant":
            "an assistant turn", "tool": "a tool result"}
    for n, m in enumerate(msgs[skip:], skip + 1):
        role = m.get("role")
        if pending:                                  # results of the previous turn's calls
            if role != "tool":
                return [f"message {n} ({role}): expected a tool result, {len(pending)} call(s) "
                        f"of the previous assistant turn are unanswered"]
            hit = _answered(m, pending)
            if hit is None:
                which = f"tool_call_id {m['tool_call_id']!r}" if m.get("tool_call_id") is not \
                    None else f"name {m.get('name')!r}"
                return [f"message {n} (tool): its {which} answers none of the open calls "
                        f"({', '.join(c['name'] for c in pending)})"]
            pending.remove(hit)
            state = "assistant" if not pending else state
        elif state in ("user", "final") and role == "user":
            state = "assistant"
        elif state == "assistant" and role == "assistant":
            try:
                pending = turn_calls(m)
            except ValueError as e:
                return [f"message {n} (assistant): {e}"]
            state = "tool" if pending else "final"
        else:
            return [f"message {n} ({role}): expected {want[state]}"]
    return [] if state == "final" else [f"the transcript ends expecting {want[state]}; it must "
                                        f"end on an assistant turn without tool calls"]
