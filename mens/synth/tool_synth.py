"""Tool-using records from the teacher (`mens data synth synth.tools=FILE`, issue #38).

FILE holds the tool schemas (a JSON list, or JSONL one a line; OpenAI's {"type": "function",
"function": {"name", "description", "parameters"}} or the bare {"name", …}). Per leaf the teacher
is asked (json_schema `mens_tool_samples`, mens.synth.teacher.schemas) for conversations in which
the assistant calls those tools: a request, rounds of calls each with its results, a final
answer (no rounds when the request needs no tool). Each sample becomes a record in mens's
structured form — record-level `tools`, assistant turns with `tool_calls` whose `arguments` are
objects, `tool` turns answering them by `tool_call_id` — the form `data=file` reads and every
family's template renders natively (mens.data.tools).

Admission (the oracle of a tool synthesis): every call names a tool of FILE and its arguments are
a JSON object that validates against that tool's parameters schema (jsonschema, through
mens.synth.oracle_checks.schema_errors); every round has one result per call; the record reads
back through mens.data.formats as a chat. A sample that fails any of it is rejected — counted
(`invalid_tool_samples`) and quarantined with every problem, located — never written as a record.
The validation parses and validates only; it runs in this process (nothing is executed).
"""
from __future__ import annotations

import json

from mens.errors import ConfigError, DataError


def load_tools(path) -> list[dict]:
    """synth.tools → the tools in OpenAI's form. Exit 2 naming the file for a bad one."""
    from mens.data.sources import expand, read_file
    from mens.data.tools import ToolError, normalize_tools

    p = expand(str(path), "synth.tools")[0]
    if p.suffix.lower() not in (".json", ".jsonl"):
        raise DataError(f"{p}: synth.tools must be a .json list of tool schemas or .jsonl with "
                        f"one schema a line.", p, key="synth.tools")
    try:
        tools = normalize_tools([r for _, r in read_file(p)], "synth.tools")
    except ToolError as e:
        raise DataError(f"{e.why}.", p, key="synth.tools") from None
    if not tools:
        raise DataError("synth.tools lists no tool: give at least one schema.", p,
                        key="synth.tools")
    for t in tools:          # a schema jsonschema cannot use would reject every call: say it now
        bad = _schema_invalid(t["function"].get("parameters") or {"type": "object"})
        if bad:
            raise DataError(f"the parameters of tool {t['function']['name']!r}: {bad}.", p,
                            key="synth.tools")
    return tools


def _schema_invalid(schema) -> str | None:
    from mens.synth.oracle_checks import schema_errors

    errs = schema_errors({}, schema)
    return errs[0].split(": ", 1)[1] if errs and "the schema itself is invalid" in errs[0] \
        else None


def check_strategy(strategy: str) -> None:
    if strategy == "cot_distill":
        raise ConfigError("synth.tools with synth.strategy=cot_distill: a tool conversation has "
                          "no reasoning block to distil; use zero_shot, few_shot_seed or "
                          "oracle_repair.", key="synth.strategy")


# ---- the validation (also mens.eval.toolcalls' schema-valid rate) ---------------------------
def schemas_of(tools: list[dict]) -> dict[str, dict]:
    """{tool name: its parameters' JSON schema} (OpenAI's form or bare)."""
    out = {}
    for t in tools or []:
        fn = t.get("function", t)
        out[fn["name"]] = fn.get("parameters") or {"type": "object"}
    return out


def call_problems(calls: list[dict], schemas: dict[str, dict]) -> list[str]:
    """What is wrong with these calls ({"name", "arguments": object}): a tool not offered,
    arguments that fail its schema (jsonschema's path and message). [] when all are valid."""
    from mens.synth.oracle_checks import schema_errors

    problems = []
    for k, c in enumerate(calls, 1):
        if c["name"] not in schemas:
            problems.append(f"call {k} `{c['name']}`: no such tool (offered: "
                            f"{', '.join(sorted(schemas)) or 'none'})")
        else:
            problems += [f"call {k} `{c['name']}` arguments {e}"
                         for e in schema_errors(c["arguments"], schemas[c["name"]])]
    return problems


# ---- prompt and record --------------------------------------------------------------------------
def sample_messages(cfg, leaf, topic: list[str], system: str, tools: list[dict],
                    seeds: list[str]) -> list[dict]:
    s = cfg.synth
    lines = [f"Task: tool samples. Topic: {' > '.join(topic)}",
             f"Domain: {cfg.spoke.domain}." + (f" {leaf.description}" if leaf.description else ""),
             f"Write {s.per_leaf} diverse training conversations on this topic in which an "
             f"assistant uses the tools below. For each: a realistic user request (`prompt`); "
             f"`steps`, the rounds of tool calls the assistant makes in order — each call's "
             f"`name` is one of the tools and its `arguments` a JSON object, written as a "
             f"string, that is valid against that tool's `parameters` schema, and `results` "
             f"holds what each call of the round returned, one per call, in order; then the "
             f"`answer` the assistant gives from the results. A request that needs no tool has "
             f"no steps. The assistant is the one this system prompt describes:",
             f"<<<\n{system}\n>>>", "Tools:"]
    lines += [json.dumps(t["function"], ensure_ascii=False) for t in tools]
    lines.append(f"Difficulty {leaf.difficulty[0]}-{leaf.difficulty[1]} of 10; no two alike.")
    if seeds:
        lines.append("Requests of the kind wanted (do not copy them):")
        lines += [f"- {json.dumps(p)}" for p in seeds]
    if s.strategy == "oracle_repair":
        lines.append("Every call is checked against its tool's JSON schema; a conversation with "
                     "an invalid call is discarded.")
    return [{"role": "user", "content": "\n".join(lines)}]


def build(sample: dict, system: str, tools: list[dict]) -> tuple[dict | None, list[str], int]:
    """(the record or None, its problems, its calls): one teacher sample as a structured record,
    every call checked (see the module docstring)."""
    from mens.data.formats import Bad, normalize

    schemas, problems, n = schemas_of(tools), [], 0
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": sample["prompt"]}]
    for k, step in enumerate(sample["steps"], 1):
        where = f"steps[{k - 1}]"
        if not step["calls"]:
            problems.append(f"{where}: a round without calls (a request that needs no tool has "
                            f"no steps)")
            continue
        if len(step["results"]) != len(step["calls"]):
            problems.append(f"{where}: {len(step['calls'])} calls but {len(step['results'])} "
                            f"results (one result per call, in order)")
        calls = []
        for j, c in enumerate(step["calls"]):
            n += 1
            try:
                args = json.loads(c["arguments"])
            except json.JSONDecodeError as e:
                problems.append(f"{where}.calls[{j}] `{c['name']}`: arguments are not JSON "
                                f"({e.msg} at char {e.pos})")
                continue
            if not isinstance(args, dict):
                problems.append(f"{where}.calls[{j}] `{c['name']}`: arguments must be a JSON "
                                f"object, not {type(args).__name__}")
                continue
            calls.append({"name": c["name"], "arguments": args})
        problems += [f"{where}.{p}" for p in call_problems(calls, schemas)]
        ids = [f"call_{k}_{j}" for j in range(len(calls))]
        msgs.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": i, "type": "function", "function": c} for i, c in zip(ids, calls)]})
        msgs += [{"role": "tool", "tool_call_id": i, "name": c["name"], "content": r}
                 for i, c, r in zip(ids, calls, step["results"])]
    msgs.append({"role": "assistant", "content": sample["answer"]})
    if problems:
        return None, problems, n
    try:   # what `data=file` will read: the same record, or this problem now
        return normalize({"messages": msgs, "tools": tools}, "messages"), [], n
    except Bad as b:
        return None, [f"the record does not read as a chat: {b.why}"], n
