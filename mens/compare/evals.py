"""Eval results wherever runs are shown side by side (torch-free): `mens compare` across runs,
the studio's Evals tab and the ladder's cell badges read `<run>/eval.json` (mens eval) and
`<run>/gate.json` (mens gate) through these functions, so a number reads the same everywhere.

    read_eval(dir)                 -> eval.json as written (None: never evaluated)
    gate_summary(run)              -> {status, verdict, reasons, metric, in_domain, badge} | None
    eval_table(runs, names)        -> one row per metric name, one cell per run (or None)
    evals_md(table)                -> that table (and the gate verdicts) as markdown lines
    badge(rec, status)

A metric row is the shape mens/eval/__init__.py documents ({name, group, n, base, tuned, delta,
gain, …}, each number {"value", "ci": [lo, hi]}); the receipt's reading stays
mens.run.receipt's (read_receipt, receipt_status). Every number reads as mens.run.evalrow
formats it ("55.0 [45.0, 65.0]", gains "+4.0 [-1.0, +9.0] pts"), as in eval.md, the gate and
the card; each cell also carries that reading as `text` for the studio.
"""
from __future__ import annotations

import json
from pathlib import Path

from mens.errors import ConfigError
from mens.run.evalrow import MetricRow
from mens.run.receipt import RECEIPT, read_receipt, receipt_status

EVAL = "eval.json"
KIND = "mens.eval"
GROUPS = ("in_domain", "benchmark", "collateral", "judge")   # the table's order: the point first


def read_eval(path: Path | str) -> dict | None:
    """<dir>/eval.json (or that file itself) as mens eval wrote it; None when there is none.
    A file that is not one (another tool's eval.json, a hand edit) is a ConfigError naming it:
    showing it as results would put made-up numbers beside real ones."""
    p = Path(path)
    p = p if p.name == EVAL and p.is_file() else p / EVAL
    if not p.is_file():
        return None
    try:
        data = json.loads(p.read_text())
    except ValueError as e:
        raise ConfigError(f"{p} is not JSON ({e}); rerun `mens eval run={p.parent}` to write "
                          f"it again.", key="eval") from None
    if not isinstance(data, dict) or data.get("kind") != KIND or not isinstance(
            data.get("rows"), list):
        raise ConfigError(f"{p} is not a mens eval.json (kind {KIND!r} with rows); rerun "
                          f"`mens eval run={p.parent}` or move the file away.", key="eval")
    return data


# --- formatting: mens.run.evalrow's one reading ------------------------------------------------
def badge(receipt: dict | None, status: str) -> str | None:
    """A ladder cell's one line from its gate receipt: a pass shows the gated metric's gain
    with its interval ("pass@1 gain +12.0 [+4.0, +20.0] pts"), a fail its first reason, a
    void receipt says so; None without a receipt."""
    if not receipt:
        return None
    if status == "void":
        return "gate void: the adapter changed since it was gated"
    if status == "fail":
        reasons = receipt.get("reasons") or []
        return f"gate failed: {reasons[0]}" if reasons else "gate failed (no reason recorded)"
    row = receipt.get("in_domain") or {}
    if not row.get("gain"):   # a receipt from before eval.json rows (mens gate of #16)
        return "gate passed"
    metric = receipt.get("metric") or row.get("metric") or row.get("name") or "metric"
    return f"{metric} gain {MetricRow.of(row).text('gain')}"


def gate_summary(run: Path | str) -> dict | None:
    """The run's gate verdict as shown beside its eval results; None when never gated.
    status (receipt_status): pass | fail | void (retrained since)."""
    rec = read_receipt(run)
    if rec is None:
        return None
    status, why = receipt_status(run, rec)
    return {"status": status, "why": why, "verdict": rec.get("verdict"),
            "reasons": rec.get("reasons") or [], "metric": rec.get("metric"),
            "in_domain": rec.get("in_domain"), "guards": rec.get("guards") or [],
            "badge": badge(rec, status)}


# --- across runs -------------------------------------------------------------------------------
def _order(row: dict) -> int:
    g = row.get("group")
    return GROUPS.index(g) if g in GROUPS else len(GROUPS)


def eval_table(runs: list[Path], names: list[str]) -> dict | None:
    """{"runs": names, "metrics": [{name, group, metric, higher_is_better, cells: [row | None
    per run, with its reading as `text`: MetricRow.display]}], "gates": [gate_summary | None
    per run], "evals": [eval.json's path | None]};
    None when no run has an eval.json or a gate.json (the table would be empty)."""
    evals = [read_eval(r) for r in runs]
    gates = [gate_summary(r) if (Path(r) / RECEIPT).is_file() else None for r in runs]
    if not any(evals) and not any(gates):
        return None
    metrics: dict[str, dict] = {}
    for i, ev in enumerate(evals):
        for row in (ev or {}).get("rows", []):
            m = metrics.setdefault(row["name"], {
                "name": row["name"], "group": row.get("group"), "metric": row.get("metric"),
                "higher_is_better": row.get("higher_is_better"), "cells": [None] * len(runs)})
            m["cells"][i] = {**{k: row.get(k) for k in ("n", "base", "tuned", "delta", "gain",
                                                        "version")},
                             "text": MetricRow.of(row).display()}
    ordered = sorted(metrics.values(), key=_order)   # stable: each group keeps file order
    return {"runs": names, "metrics": ordered, "gates": gates,
            "evals": [str(Path(r) / EVAL) if ev else None for r, ev in zip(runs, evals)]}


def _esc(text: str) -> str:
    return text.replace("|", "\\|")


def evals_md(table: dict | None) -> list[str]:
    """Markdown lines: the eval table (tuned value [ci] and gain [ci] per cell) and the runs'
    gate verdicts; [] without any eval or gate."""
    if not table:
        return []
    head = "| metric | " + " | ".join(_esc(n) for n in table["runs"]) + " |"
    sep = "|---" * (len(table["runs"]) + 1) + "|"
    lines = ["", "## Eval results", "",
             "Each cell: the tuned model's value [95 % interval]; below it the gain over the "
             "base (> 0 is better) [its paired interval]; n items.", "", head, sep]
    for m in table["metrics"]:
        cells = []
        for c in m["cells"]:
            cells.append("—" if c is None else
                         f"{c['text']['tuned']}<br>gain {c['text']['gain']}<br>n {c['n']}")
        arrow = "↑" if m["higher_is_better"] else "↓" if m["higher_is_better"] is False else ""
        lines.append(f"| {_esc(m['name'])} ({m['group']}{', ' + arrow if arrow else ''}) | "
                     + " | ".join(cells) + " |")
    if not table["metrics"]:
        lines.append("| (no eval.json) |" + " —|" * len(table["runs"]))
    lines += ["", "## Gate verdicts", "", head, sep]
    verdicts = []
    for g in table["gates"]:
        if g is None:
            verdicts.append("not gated")
        else:
            verdicts.append(_esc(f"{g['status']}: {g['badge']}"))
    lines.append("| gate | " + " | ".join(verdicts) + " |")
    return lines
