"""eval.md: the metric rows as a table — base, tuned and the gain, each with its interval and
the number of items, and the gain's verdict with its n (below eval.min_items: "too few to
judge") — then what the evaluation planned and noted. Each number reads as
mens.run.evalrow formats it, the one reading the gate, the card, compare, the ladder and the
studio print too."""
from __future__ import annotations

from mens.run.evalrow import MetricRow

GROUPS = ("in_domain", "collateral", "benchmark", "judge")


def verdict_text(row: dict, min_items: int, confidence: float = 0.95) -> str:
    """The gain's verdict against 0 with its n (mens.eval.stats.verdict), and the exact
    one-sided p-value of "no gain" where an exact test judged it (0/1 scores; other scores
    below 20 items); "" without a tuned side."""
    from mens.eval.stats import verdict

    if "gain" not in row:
        return ""
    p = (row.get("gain") or {}).get("p")
    return verdict(row, min_items, confidence=confidence) + \
        (f" · p={p:.3g}" if p is not None else "")


def render_md(result: dict) -> str:
    from mens.config.schema import EvalConfig
    from mens.eval.stats import min_discordant

    spec = result.get("spec") or {}
    conf = spec.get("confidence", 0.95)
    floor = spec.get("min_items", EvalConfig.min_items)
    who = result["run"] or f"base {result['rung']}"
    lines = [f"# mens eval · {who}", "",
             f"rung {result['rung']} · spoke {result['spoke']} · lane {result['lane']} · "
             f"models {', '.join(result['models'])} · {conf:.0%} intervals (paired base vs "
             f"tuned: McNemar's exact test on 0/1 scores; other scores: bootstrap over items, "
             f"an exact sign-flip test below 20 items) · verdicts on at least {floor} items "
             f"(eval.min_items) and {min_discordant(conf)} that differ · "
             f"{result['duration_s']:.0f} s", ""]
    rows = sorted(result["rows"], key=lambda r: (GROUPS.index(r["group"])
                                                 if r["group"] in GROUPS else 9, r["name"]))
    lines += ["| group | metric | n | base | tuned | gain | verdict | notes |",
              "|---|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        row = MetricRow.of(r)
        notes = []
        unv = r.get("unverified") or {}
        if unv.get("prompts_left_out"):
            notes.append(f"{unv['prompts_left_out']} prompts unverified")
        if r.get("version") is not None:
            notes.append(f"v{r['version']}")
        if r.get("ci_method"):
            notes.append(r["ci_method"])
        lines.append(f"| {r['group']} | {r['name']}{' (%)' if row.rate else ''} | {r['n']} | "
                     f"{row.text('base')} | {row.text('tuned')} | {row.text('gain')} | "
                     f"{verdict_text(r, floor, conf)} | {'; '.join(notes)} |")
    lines += ["", "## Plan", ""]
    for mode, p in (result.get("plan") or {}).items():
        lines.append(f"- {mode}: batch {p['batch']} × {p['seq_len']} tokens, peak "
                     f"{p['peak_bytes'] / 2**30:.2f} GiB of {p['budget_bytes'] / 2**30:.2f} GiB "
                     f"(analytic, uncalibrated +{p['margin']:.0%})")
    if result.get("tool_calls"):   # issue #38: what the tool_call/* rows stand on
        t = result["tool_calls"]
        lines += ["", "## Tool calls", "",
                  f"- {t['spoke']}: {t['turns']} held-out assistant turns of {t['records']} "
                  f"records that use tools ({t['call_turns']} call tools: exact, schema_valid; "
                  f"{t['no_call_turns']} answer without a call: relevance); calls read in "
                  f"{t.get('syntax')} syntax; malformed answers: "
                  + ", ".join(f"{m} {t[f'malformed_{m}']}" for m in ("base", "tuned")
                              if f"malformed_{m}" in t)
                  + (f"; no rows: {t['skipped']}" if t.get("skipped") else "")]
    if result.get("judge"):
        st = result["judge"].get("stats") or {}
        lines += ["", "## Judge", "", f"- {json_short(st)}"]
    if result.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in result["notes"]]
    return "\n".join(lines) + "\n"


def json_short(d: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in d.items() if not isinstance(v, (dict, list)))
