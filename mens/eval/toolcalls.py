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
                                    tool's JSON schema — the admission oracle tool_call_schema
                                    (jsonschema, mens.synth.tool_checks), in its sandboxed child,
                                    the check synthesis admits records by
    <spoke>/tool_call/relevance     over turns whose reference answers without a call: the answer
                                    makes none (a malformed call is a call attempted: a miss)

A malformed call (text that opens a call and does not parse) is neither exact nor schema-valid.
An answer the oracle could not judge (its child did not start) is unverified: left out of
schema_valid in both models and counted, never passed nor failed.
Intervals: paired over turns (mens.eval.stats.paired: 0/1 scores, McNemar's exact test on the
turns that differ). The gate guards exact and schema_valid (GUARDED): they must not regress
with confidence.

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

from mens.data.formats import tool_calls

METRICS = ("tool_call/exact", "tool_call/schema_valid", "tool_call/relevance")
CHECK = "tool_call_schema"    # the admission oracle that judges calls (mens.synth.tool_checks)
GUARDED = ("tool_call/exact", "tool_call/schema_valid")


def uses_tools(recs: list[dict]) -> bool:
    """Do these (held-out) records use tools? The key the tool-call rows and the gate's tool
    guards hang on — never a spoke's name."""
    return any(_uses(r) for r in recs)


def _uses(rec: dict) -> bool:
    return bool(rec.get("tools")) or tool_calls(rec) > 0


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


def schemas_of(tools: list[dict]) -> dict[str, dict]:
    """{tool name: its parameters' JSON schema} of a record's tools (OpenAI's form or bare)."""
    out = {}
    for t in tools or []:
        fn = t.get("function", t)
        out[fn["name"]] = fn.get("parameters") or {"type": "object"}
    return out


def judge(answers: list[tuple[dict, str]], syntax: str | None, **oracle) -> list:
    """The oracle's verdict (mens.synth.oracle, check `tool_call_schema`: every call names a tool
    of the record and validates against its schema, at least one call) on each (item, answer) —
    one sandboxed child for the batch, the answer read in `syntax` there. oracle: keyword
    arguments of judge_batch (timeout_s, memory_mb)."""
    from mens.synth.oracle import judge_batch
    from mens.synth.oracle_checks import oracle_record

    return judge_batch(CHECK, [oracle_record({"tools": it["tools"]}, it["head"], text, CHECK,
                                             syntax) for it, text in answers], **oracle)


def score(text: str, item: dict, syntax: str | None, verdict=None) -> dict:
    """One answer to one item: its calls read in `syntax` and the three verdicts (None where the
    item does not count for that metric). verdict: the oracle's on this answer (`judge`; needed
    where the reference calls tools). An exact answer is a valid one too: where the oracle's
    reading fails it (e.g. a Hermes block with `parameters` for `arguments`) it is not exact."""
    from mens.data.tool_syntax import parse

    p = parse(text, syntax)
    calls = [_plain(c) for c in p.calls]
    out = {"text": text, "calls": calls, "malformed": p.malformed,
           "problems": [f"malformed call: {p.malformed}"] if p.malformed else [],
           "exact": None, "schema_valid": None, "relevance": None}
    if item["reference"]:
        if verdict is None:
            raise ValueError("an item whose reference calls tools needs the oracle's verdict")
        out["schema_valid"] = verdict.passed            # None: unverified, in neither count
        if verdict.passed is None:
            out["unverified_reason"] = verdict.unverified_reason
        if verdict.diagnostics:
            out["problems"] = verdict.diagnostics.splitlines()
        out["exact"] = p.malformed is None and verdict.passed is not False and \
            calls_match(calls, item["reference"], schemas_of(item["tools"]))
    else:
        out["relevance"] = p.malformed is None and not calls
    return out


def score_all(answers: list[tuple[dict, str]], syntax: str | None, **oracle) -> list[dict]:
    """score() of every (item, answer), the oracle asked once for those that need it."""
    need = [k for k, (it, _) in enumerate(answers) if it["reference"]]
    verdicts = dict(zip(need, judge([answers[k] for k in need], syntax, **oracle)))
    return [score(text, it, syntax, verdicts.get(k)) for k, (it, text) in enumerate(answers)]


# ---- the set ----------------------------------------------------------------------------------
def score_set(slots, base_slot, tuned_slot, recs: list[dict], spec, eval_cfg, *, spoke: str,
              batch_size: int, oracle: dict | None = None) -> dict:
    """The tool-call rows of one held-out set, both models: {"rows", "items", "stats"}. slots as
    mens.eval.indomain.score_set takes them (one Slots, or (base Slots, tuned Slots)). No rows —
    said on stderr and in stats["skipped"] — when the run's template writes no tool calls.
    tuned_slot None: a base alone (its answers stand for both sides; mens.eval.run drops them).
    oracle: keyword arguments of mens.synth.oracle.judge_batch (timeout_s, memory_mb)."""
    from mens.data.examples import run_encoder
    from mens.eval.indomain import generate, room

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
    answers: dict[str, list[str]] = {}
    for m, (s, slot) in models.items():
        prompts = [s.encode(t) for t in texts]
        new = int(eval_cfg.max_new_tokens)
        stats[f"prompts_cut_{m}"] = sum(room(s, p, new) < new for p in prompts)
        print(f"mens eval: {spoke} · {m}: {len(prompts)} tool-call turns × 1 greedy answer of "
              f"≤ {new} tokens ({syntax} syntax)", file=sys.stderr, flush=True)
        answers[m] = [a[0] for a in generate(s, slot, prompts, n=1, temperature=0.0, top_p=1.0,
                                             max_new=new, seed=eval_cfg.seed,
                                             batch_size=batch_size)]
    # every answer of both models judged in ONE oracle batch (one sandboxed child)
    flat = score_all([(it, answers[m][i]) for m in models for i, it in enumerate(items)], syntax,
                     **(oracle or {}))
    scored = {m: flat[j * len(items):(j + 1) * len(items)] for j, m in enumerate(models)}
    for m in models:
        stats[f"malformed_{m}"] = sum(v["malformed"] is not None for v in scored[m])
    scored.setdefault("tuned", scored["base"])
    boot = {"confidence": eval_cfg.confidence, "reps": eval_cfg.bootstrap, "seed": eval_cfg.seed}
    rows = [_row(spoke, metric, scored, boot, syntax) for metric in METRICS]
    out_items = [{"id": it["id"], "record": it["record"], "turn": it["turn"],
                  "reference": it["reference"], **{m: scored[m][i] for m in models}}
                 for i, it in enumerate(items)]
    return {"rows": rows, "items": out_items, "stats": stats}


def _row(spoke: str, metric: str, scored: dict, boot: dict, syntax: str) -> dict:
    """A paired row over the items the metric counts; an item unverified in either model (the
    oracle could not run) is left out of both and counted, never passed nor failed."""
    from mens.eval.indomain import row
    from mens.eval.stats import paired

    key = metric.split("/")[1]
    calls = key != "relevance"            # exact, schema_valid: the turns whose reference calls
    counted = [i for i, v in enumerate(scored["base"]) if (v["exact"] is not None) == calls]
    both = [i for i in counted
            if scored["base"][i][key] is not None and scored["tuned"][i][key] is not None]
    b = [float(scored["base"][i][key]) for i in both]
    t = [float(scored["tuned"][i][key]) for i in both]
    extra = {}
    if key == "schema_valid":
        unv = {m: [scored[m][i] for i in counted if scored[m][i][key] is None]
               for m in ("base", "tuned")}
        extra["unverified"] = {"base": len(unv["base"]), "tuned": len(unv["tuned"]),
                               "prompts_left_out": len(counted) - len(both),
                               "reasons": sorted({v["unverified_reason"] for vs in unv.values()
                                                  for v in vs if v.get("unverified_reason")})}
    return row(spoke, "spoke", metric, paired(b, t, higher_is_better=True, **boot), True,
               check=CHECK, syntax=syntax, **extra)


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
