"""eval.md: the metric rows as a table — base, tuned and the gain, each with its interval and
the number of items, and the gain's verdict with its n (below eval.min_items: "too few to
judge") — then what the evaluation planned and noted. Also the short form the
gate and compare print (`fmt_value`, `fmt_gain`)."""
from __future__ import annotations

GROUPS = ("in_domain", "collateral", "benchmark", "judge")


def _num(x, pct: bool) -> str:
    if x is None:
        return "—"
    return f"{100 * x:.1f}" if pct else f"{x:.4f}"


def is_rate(row: dict) -> bool:
    """A rate in [0, 1] shown in percent (pass rates, accuracies, a win rate); loss is not."""
    return row.get("metric") != "loss" and not row.get("name", "").endswith("/loss")


def fmt_value(v: dict | None, pct: bool) -> str:
    if not v or v.get("value") is None:
        return "—"
    ci = v.get("ci")
    inner = f" [{_num(ci[0], pct)}, {_num(ci[1], pct)}]" if ci else ""
    return f"{_num(v['value'], pct)}{inner}"


def fmt_gain(row: dict) -> str:
    """The gain in points of a rate (percent) or, for loss, in % of the base's loss removed."""
    g = row.get("gain") or {}
    if g.get("value") is None:
        return "—"
    unit = " pts" if is_rate(row) else " %"
    ci = g.get("ci")
    inner = f" [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]" if ci else ""
    return f"{100 * g['value']:+.1f}{inner}{unit}"


def verdict_text(row: dict, min_items: int) -> str:
    """The gain's verdict against 0 with its n (mens.eval.stats.verdict), and the exact
    one-sided p-value of "no gain" where the items were fewer than 20; "" without a tuned side."""
    from mens.eval.stats import verdict

    if "gain" not in row:
        return ""
    p = (row.get("gain") or {}).get("p")
    return verdict(row, min_items) + (f" · p={p:.3g}" if p is not None else "")


def render_md(result: dict) -> str:
    from mens.config.schema import EvalConfig

    spec = result.get("spec") or {}
    conf = spec.get("confidence", 0.95)
    floor = spec.get("min_items", EvalConfig.min_items)
    who = result["run"] or f"base {result['rung']}"
    lines = [f"# mens eval · {who}", "",
             f"rung {result['rung']} · spoke {result['spoke']} · lane {result['lane']} · "
             f"models {', '.join(result['models'])} · {conf:.0%} intervals (paired base vs "
             f"tuned: bootstrap over items; an exact sign-flip test below 20 items) · verdicts "
             f"on at least {floor} items (eval.min_items) · {result['duration_s']:.0f} s", ""]
    rows = sorted(result["rows"], key=lambda r: (GROUPS.index(r["group"])
                                                 if r["group"] in GROUPS else 9, r["name"]))
    lines += ["| group | metric | n | base | tuned | gain | verdict | notes |",
              "|---|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        pct = is_rate(r)
        notes = []
        unv = r.get("unverified") or {}
        if unv.get("prompts_left_out"):
            notes.append(f"{unv['prompts_left_out']} prompts unverified")
        if r.get("version") is not None:
            notes.append(f"v{r['version']}")
        if r.get("ci_method"):
            notes.append(r["ci_method"])
        lines.append(f"| {r['group']} | {r['name']}{' (%)' if pct else ''} | {r['n']} | "
                     f"{fmt_value(r.get('base'), pct)} | {fmt_value(r.get('tuned'), pct)} | "
                     f"{fmt_gain(r)} | {verdict_text(r, floor)} | {'; '.join(notes)} |")
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
