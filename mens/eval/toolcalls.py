"""Tool-call scoring of held-out turns (issue #38): did the model call the right tool with the
right arguments, were its calls valid, and did it keep from calling when no call was needed?

Every assistant turn of a held-out record that uses tools (it lists `tools`, or some turn has
`tool_calls`) is one item: the model is prompted with the conversation before that turn and the
record's tools (rendered by the run's own chat template, as training rendered them), answers
greedily, and its calls are read back in the run's syntax (mens.data.tool_syntax: hermes, llama3,
mistral). Rows (mens.eval's metric row, group in_domain, paired base vs tuned):

    <spoke>/tool_call/exact         over turns whose reference calls tools: the answer parses and
                                    its calls equal the reference's, call order and argument-key
                                    order free (an AST match, below)
    <spoke>/tool_call/schema_valid  over the same turns: at least one call, and every call names
                                    a tool of the record and its arguments validate against that
                                    tool's JSON schema (jsonschema: mens.synth.tool_synth's
                                    call_problems, the check synthesis admits records by)
    <spoke>/tool_call/relevance     over turns whose reference answers without a call: the answer
                                    makes none (a malformed call is a call attempted: a miss)

A malformed call (text that opens a call and does not parse) is neither exact nor schema-valid.
Intervals: paired bootstrap over turns (mens.eval.stats.paired). The gate guards exact and
schema_valid (GUARDED): they must not regress with confidence.

Equality follows the Berkeley Function-Calling Leaderboard's AST checker (bfcl/eval_checker/
ast_eval/ast_checker.py), the subset that fits JSON arguments: the same number of calls, matched
without regard to order (its parallel_function_checker_no_order); names equal; no argument the
reference lacks and none it has missing, where an argument absent on one side equals the schema's
`default` on the other (BFCL lists an optional argument's default among the possible answers); an
int equals the float of the same value (BFCL lets an int stand for a float) but a bool is never a
number; lists in order, objects key-order free, recursively. Unlike BFCL, strings are compared
exactly — BFCL also drops case, spaces and ",./-_*^", which would make `src/a.py` equal `srca.py`,
and a tool's arguments are copied from the prompt, so verbatim is what is asked.
"""
from __future__ import annotations

import sys

METRICS = ("tool_call/exact", "tool_call/schema_valid", "tool_call/relevance")
GUARDED = ("tool_call/exact", "tool_call/schema_valid")


def uses_tools(recs: list[dict]) -> bool:
    """Do these (held-out) records use tools? The key the tool-call rows and the gate's tool
    guards hang on — never a spoke's name."""
    return any(_uses(r) for r in recs)


def _uses(rec: dict) -> bool:
    return bool(rec.get("tools")) or any(m.get("tool_calls") for m in rec.get("messages") or [])


def is_guard(row: dict) -> bool:
    """An in-domain tool-call row the gate guards against a confident regression."""
    return row.get("group") == "in_domain" and row.get("metric") in GUARDED


def turns(recs: list[dict]) -> list[dict]:
    """One item per assistant turn of every record that uses tools: its prompt (the turns before
    it), the record's tools and the reference calls ([]: the turn answers without a call)."""
    out = []
    for r in recs:
        if not _uses(r):
            continue
        msgs = r["messages"]
        for i, m in enumerate(msgs):
            if m["role"] == "assistant" and i > 0:
                out.append({"id": f"{r['id']}#{i}", "record": r["id"], "turn": i,
                            "head": msgs[:i], "tools": r.get("tools") or [],
                            "reference": [_plain(c) for c in m.get("tool_calls") or []]})
    return out


def _plain(call: dict) -> dict:
    fn = call.get("function", call)
    return {"name": fn["name"], "arguments": fn.get("arguments") or {}}


# ---- equality and validity ------------------------------------------------------------------
def same_value(a, b) -> bool:
    """JSON values equal as parsed values (see the module docstring)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _defaults(schema: dict | None) -> dict:
    props = (schema or {}).get("properties") or {}
    return {k: p["default"] for k, p in props.items() if isinstance(p, dict) and "default" in p}


def same_call(pred: dict, ref: dict, schemas: dict[str, dict]) -> bool:
    """One call against one reference call: names equal, arguments equal with absent = default."""
    if pred["name"] != ref["name"]:
        return False
    d = _defaults(schemas.get(ref["name"]))
    return same_value({**d, **pred["arguments"]}, {**d, **ref["arguments"]})


def calls_match(pred: list[dict], ref: list[dict], schemas: dict[str, dict]) -> bool:
    """The same calls in any order: each reference call takes the first unmatched call equal to
    it (equality is exact, so first-fit finds a full matching whenever one exists)."""
    if len(pred) != len(ref):
        return False
    left = list(range(len(pred)))
    for r in ref:
        hit = next((j for j in left if same_call(pred[j], r, schemas)), None)
        if hit is None:
            return False
        left.remove(hit)
    return True


def score(text: str, item: dict, syntax: str | None) -> dict:
    """One answer to one item: its calls read in `syntax` and the three verdicts (None where the
    item does not count for that metric)."""
    from mens.data.tool_syntax import parse
    from mens.synth.tool_synth import call_problems, schemas_of

    p = parse(text, syntax)
    calls = [_plain(c) for c in p.calls]
    schemas = schemas_of(item["tools"])
    problems = [f"malformed call: {p.malformed}"] if p.malformed else call_problems(calls, schemas)
    out = {"text": text, "calls": calls, "malformed": p.malformed, "problems": problems,
           "exact": None, "schema_valid": None, "relevance": None}
    if item["reference"]:
        ok = p.malformed is None
        out["exact"] = ok and calls_match(calls, item["reference"], schemas)
        out["schema_valid"] = ok and bool(calls) and not problems
    else:
        out["relevance"] = p.malformed is None and not calls
    return out


# ---- the set ----------------------------------------------------------------------------------
def score_set(slots, base_slot, tuned_slot, recs: list[dict], spec, eval_cfg, *, spoke: str,
              batch_size: int) -> dict:
    """The tool-call rows of one held-out set, both models: {"rows", "items", "stats"}. slots as
    mens.eval.indomain.score_set takes them (one Slots, or (base Slots, tuned Slots)). No rows —
    said on stderr and in stats["skipped"] — when the run's template writes no tool calls.
    tuned_slot None: a base alone (its answers stand for both sides; mens.eval.run drops them)."""
    from mens.data.examples import run_encoder
    from mens.eval.indomain import generate, room, row
    from mens.eval.stats import paired

    b_slots, t_slots = slots if isinstance(slots, tuple) else (slots, slots)
    models = {"base": (b_slots, base_slot)}
    if tuned_slot is not None:
        models["tuned"] = (t_slots, tuned_slot)
    items = turns(recs)
    stats = {"records": sum(_uses(r) for r in recs), "turns": len(items),
             "call_turns": sum(bool(it["reference"]) for it in items),
             "no_call_turns": sum(not it["reference"] for it in items)}
    enc = run_encoder(b_slots.tokenizer, spec)
    syntax = enc.tool_syntax
    stats["syntax"] = syntax
    if syntax is None or not items:
        why = (f"the chat template ({enc.template.origin}) writes no tool calls; set "
               f"data.tool_format=hermes" if syntax is None else "no assistant turn to score")
        print(f"mens eval: note: {spoke}: no tool-call rows: {why}", file=sys.stderr)
        return {"rows": [], "items": [], "stats": {**stats, "skipped": why}}
    texts = [enc.prompt_text(it["head"], it["tools"]) for it in items]
    scored: dict[str, list[dict]] = {}
    for m, (s, slot) in models.items():
        prompts = [s.encode(t) for t in texts]
        new = int(eval_cfg.max_new_tokens)
        stats[f"prompts_cut_{m}"] = sum(room(s, p, new) < new for p in prompts)
        print(f"mens eval: {spoke} · {m}: {len(prompts)} tool-call turns × 1 greedy answer of "
              f"≤ {new} tokens ({syntax} syntax)", file=sys.stderr, flush=True)
        answers = generate(s, slot, prompts, n=1, temperature=0.0, top_p=1.0, max_new=new,
                           seed=eval_cfg.seed, batch_size=batch_size)
        scored[m] = [score(a[0], it, syntax) for a, it in zip(answers, items)]
        stats[f"malformed_{m}"] = sum(v["malformed"] is not None for v in scored[m])
    scored.setdefault("tuned", scored["base"])
    boot = {"confidence": eval_cfg.confidence, "reps": eval_cfg.bootstrap, "seed": eval_cfg.seed}
    rows = []
    for metric in METRICS:
        key = metric.split("/")[1]
        idx = [i for i, v in enumerate(scored["base"]) if v[key] is not None]
        b = [float(scored["base"][i][key]) for i in idx]
        t = [float(scored["tuned"][i][key]) for i in idx]
        rows.append(row(spoke, "spoke", metric, paired(b, t, higher_is_better=True, **boot), True,
                        check="tool_call", syntax=syntax))
    out_items = [{"id": it["id"], "record": it["record"], "turn": it["turn"],
                  "reference": it["reference"], **{m: scored[m][i] for m in models}}
                 for i, it in enumerate(items)]
    return {"rows": rows, "items": out_items, "stats": stats}


def missing_guards(result: dict) -> list[str]:
    """The gate's reasons when an eval's in-domain set uses tools but its tool-call rows that the
    gate guards are not there (the template writes no calls): a guard that is absent never
    fails, so its absence does."""
    t = result.get("tool_calls")
    if not t:
        return []
    have = {r.get("metric") for r in result["rows"] if is_guard(r)}
    why = t.get("skipped") or "not in eval.json"
    return [f"in-domain {t['spoke']} {m}: the held-out records use tools but there is no "
            f"tool-call result ({why})" for m in GUARDED if m not in have]
