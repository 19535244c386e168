"""Tool-using records from the teacher (`mens data synth synth.tools=FILE`, issue #38).

FILE holds the tool schemas (a JSON list, or JSONL one a line; OpenAI's {"type": "function",
"function": {"name", "description", "parameters"}} or the bare {"name", …}). Per leaf the teacher
is asked (json_schema `mens_tool_samples`, mens.synth.teacher.schemas) for conversations in which
the assistant calls those tools: a request, rounds of calls each with its results, a final
answer (no rounds when the request needs no tool). Each sample becomes a record in mens's
structured form — record-level `tools`, assistant turns with `tool_calls` whose `arguments` are
objects, `tool` turns answering them by `tool_call_id` — the form `data=file` reads and every
family's template renders natively (mens.data.tools).

Admission, in two steps. Here (`build`): every call's arguments are a JSON object, every round
has one result per call, and the record reads back through mens.data.formats as a chat. Then the
admission oracles, in their sandboxed child (mens.synth.oracle, mens.synth.tool_checks — the
checks the tool spokes are admitted by): `transcript_structure` (each result answers a call of
the turn before; the record ends on a final answer) on every record, and `tool_call_schema`
(every call names a tool of FILE and its arguments validate against its parameters schema,
jsonschema) on every record that calls. A sample that fails any of it is rejected — counted
(`invalid_tool_samples`) and quarantined with every problem, located — never written as a record.
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
    from mens.synth.tool_checks import schema_errors

    errs = schema_errors({}, schema)
    return errs[0].split(": ", 1)[1] if errs and "the schema itself is invalid" in errs[0] \
        else None


def check_strategy(strategy: str) -> None:
    if strategy == "cot_distill":
        raise ConfigError("synth.tools with synth.strategy=cot_distill: a tool conversation has "
                          "no reasoning block to distil; use zero_shot, few_shot_seed or "
                          "oracle_repair.", key="synth.strategy")


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
    """(the record or None, its problems, its calls): one teacher sample as a structured record
    (the oracles judge it next: `admit`)."""
    from mens.data.formats import Bad, normalize

    problems, n = [], 0
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


CHECKS = ("transcript_structure", "tool_call_schema")


def judge(samples: list[dict], system: str, tools: list[dict], **limits) -> list[tuple]:
    """(sample, record, passed, diagnostics, calls) per teacher sample: built (`build`), then
    judged by the admission oracles in their sandboxed child — one child per check for the batch:
    transcript_structure on every record, tool_call_schema on those that call (it fails a record
    without a call). passed None: an oracle could not run here (unverified, never passed).
    limits: judge_batch's timeout_s, memory_mb."""
    from mens.synth.oracle import judge_batch

    built = [(sample, *build(sample, system, tools)) for sample in samples]
    ok = [k for k, b in enumerate(built) if b[1] is not None]
    calling = [k for k in ok if built[k][3]]
    verdicts: dict[int, list] = {k: [] for k in ok}
    for check, which in zip(CHECKS, (ok, calling)):
        for k, v in zip(which, judge_batch(check, [built[k][1] for k in which], **limits)):
            verdicts[k].append(v)
    out = []
    for k, (sample, rec, problems, n) in enumerate(built):
        if rec is None:
            out.append((sample, None, False, "\n".join(problems), n))
            continue
        vs = verdicts[k]
        passed = False if any(v.passed is False for v in vs) else \
            None if any(v.passed is None for v in vs) else True
        why = "\n".join(f"{v.check}: {v.diagnostics or v.unverified_reason}" for v in vs
                        if v.passed is not True)
        out.append((sample, rec, passed, why, n))
    return out
