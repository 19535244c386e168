"""The fit's report: predicted vs measured for every record (mens and the two rules of thumb,
side by side on the same shapes), the held-out acceptance summary, and a PNG scatter.

`held_out_table()` prints the held-out table from the committed records and contract; it is
what `make bench` shows.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from mens.calibrate.records import (BIG, MiB, collect, one_device_key, record_components,
                                    resolve)
from mens.plan.memory import load_contract, min_margin, predict, usable_cell
from mens.calibrate.rules import RULES
from mens.run.rundir import atomic_write

ACCEPT = {"median_pct": 5.0, "max_pct": 10.0, "small_mib": 64.0}


def rows(records: list[dict], contract) -> list[dict]:
    """One row per record with a measurement: mens's prediction as the planner would make it
    now (this contract), and each rule of thumb's, with errors relative to the measurement."""
    out = []
    for r in records:
        m = r.get("measured_peak_bytes")
        if m is None or r.get("status") not in ("ok", "lower_bound"):
            continue
        pred = predict(record_components(r, contract), _cell(contract, r["cell"]),
                       min_margin(contract))
        row = {"id": r["id"], "role": r.get("role"), "status": r["status"], "cell": r["cell"],
               "rung": r["rung"]["name"], "seq_len": r["seq_len"], "micro_batch": r["micro_batch"],
               "measured": m, "big": m >= BIG, "calibrated": pred["calibrated"],
               "mens": pred["raw_bytes"], "mens_peak": pred["peak_bytes"],
               # a lower bound above prediction + uncertainty is an exceedance too: the true
               # peak is at least that
               "exceeds": m > pred["peak_bytes"]}
        for name, rule in RULES.items():
            row[name] = rule(r)
        out.append(row)
    return out


def _cell(contract, key: str):
    """The cell the planner would use (mens.plan.planner): a multi-device key without a fit of
    its own falls back to its one-device cell's coefficients, uncalibrated."""
    cell = usable_cell(contract, key)
    one = one_device_key(key)
    if cell is None and one != key and (cell := usable_cell(contract, one)):
        cell = {**cell, "calibrated": False}
    return cell


def _err(pred: int, m: int) -> float:
    return 100.0 * (pred - m) / m


def summary(rs: list[dict], role: str = "held_out") -> dict:
    """Acceptance numbers over `ok` rows of a role: relative errors for peaks ≥ 512 MiB,
    absolute (MiB) below, and how many measurements (lower bounds too) exceed prediction +
    uncertainty."""
    sel = [r for r in rs if r["role"] == role and r["status"] == "ok"]
    big, small = [r for r in sel if r["big"]], [r for r in sel if not r["big"]]
    out = {"role": role, "records": len(sel), "big": len(big), "small": len(small),
           "exceeding": [r["id"] for r in rs if r["role"] == role and r["exceeds"]]}
    for name in ("mens", *RULES):
        e = [abs(_err(r[name], r["measured"])) for r in big]
        a = [abs(r[name] - r["measured"]) / MiB for r in small]
        out[name] = {"median_pct": statistics.median(e) if e else None,
                     "max_pct": max(e) if e else None, "max_small_mib": max(a) if a else None,
                     "under": sum(r[name] < r["measured"] for r in sel)}
    m = out["mens"]
    out["accepted"] = bool(sel) and not out["exceeding"] and all((
        m["median_pct"] is None or m["median_pct"] <= ACCEPT["median_pct"],
        m["max_pct"] is None or m["max_pct"] <= ACCEPT["max_pct"],
        m["max_small_mib"] is None or m["max_small_mib"] <= ACCEPT["small_mib"]))
    return out


def table(rs: list[dict]) -> str:
    names = ("mens", *RULES)
    head = ("| record | role | cell | rung | s×b | measured MiB | "
            + " | ".join(f"{n} MiB (err)" for n in names) + " | mens peak ± unc. |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rs:
        cells = []
        for n in names:
            e = _err(r[n], r["measured"])
            cells.append(f"{r[n] / MiB:,.0f} ({e:+.1f} %)" if r["big"] else
                         f"{r[n] / MiB:,.0f} ({(r[n] - r['measured']) / MiB:+,.0f} MiB)")
        flag = "" if r["status"] == "ok" else f" [{r['status']}]"
        lines.append(f"| {r['id']}{flag} | {r['role']} | {r['cell']} | {r['rung']} | "
                     f"{r['seq_len']}×{r['micro_batch']} | {r['measured'] / MiB:,.0f} | "
                     + " | ".join(cells) + f" | {r['mens_peak'] / MiB:,.0f}"
                     f"{' EXCEEDED' if r['exceeds'] else ''}"
                     f"{'' if r['calibrated'] else ' (uncalibrated)'} |")
    return "\n".join(lines)


def summary_text(s: dict) -> str:
    def f(v, unit):
        return "—" if v is None else f"{v:.1f}{unit}"
    lines = [f"{s['role']}: {s['records']} records ({s['big']} with peaks ≥ 512 MiB, "
             f"{s['small']} below)"]
    for name in ("mens", *RULES):
        m = s[name]
        lines.append(f"  {name:30} median |err| {f(m['median_pct'], ' %'):>8} · max |err| "
                     f"{f(m['max_pct'], ' %'):>8} · max |err| below 512 MiB "
                     f"{f(m['max_small_mib'], ' MiB'):>9} · under-predicts {m['under']}")
    lines.append(f"  measurements above mens's prediction + uncertainty: "
                 f"{len(s['exceeding'])} {s['exceeding'] or ''}")
    lines.append(f"  acceptance (median ≤ 5 %, max ≤ 10 % from 512 MiB, ≤ 64 MiB below, none "
                 f"above): {'MET' if s['accepted'] else 'NOT MET'}")
    return "\n".join(lines)


def cell_text(rs: list[dict], contract) -> str:
    """Per fitted cell: its label, uncertainty, and its held-out records' worst errors (relative
    from 512 MiB, absolute below) — the table that shows which cells earned `calibrated`."""
    lines = ["| cell | label | uncertainty | held out | max error ≥ 512 MiB | max error below | "
             "above prediction + unc. |", "|---|---|---|---|---|---|---|"]
    for key, cell in sorted((contract.get("cells") or {}).items()):
        if usable_cell(contract, key) is None:
            continue
        sel = [r for r in rs if r["cell"] == key and r["role"] == "held_out" and
               r["status"] == "ok"]
        big = [abs(_err(r["mens"], r["measured"])) for r in sel if r["big"]]
        small = [abs(r["mens"] - r["measured"]) / MiB for r in sel if not r["big"]]
        lines.append(f"| {key} | {'calibrated' if cell.get('calibrated') else 'UNCALIBRATED'} | "
                     f"{cell['uncertainty']:.1%} | {len(sel)} | "
                     f"{f'{max(big):.1f} %' if big else '—'} | "
                     f"{f'{max(small):.0f} MiB' if small else '—'} | "
                     f"{sum(r['exceeds'] for r in sel)} |")
    return "\n".join(lines)


def split_text(rs: list[dict]) -> str:
    """The held-out summary again, separately for cells labelled calibrated and for the rest:
    the label is the claim, so the acceptance is checked against it."""
    out = []
    for label, keep in (("cells labelled calibrated", True), ("cells NOT calibrated", False)):
        sel = [r for r in rs if r["role"] == "held_out" and r["calibrated"] == keep]
        if sel:
            out.append(f"{label}:\n" + summary_text(summary(sel)))
    return "\n".join(out)


def scatter(rs: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 6))
    gib = 2**30
    series = [("mens (fit records)", "mens", "fit", "o"), ("mens (held out)", "mens", "held_out", "s")]
    series += [(n, n, None, mk) for n, mk in zip(RULES, "^v")]
    for label, key, role, marker in series:
        pts = [(r["measured"] / gib, r[key] / gib) for r in rs
               if r["status"] == "ok" and (role is None or r["role"] == role)]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, label=label, alpha=0.75, s=28)
    lo = min(r["measured"] for r in rs) / gib / 1.5
    hi = max(max(r["measured"], r["mens"]) for r in rs) / gib * 1.5
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="exact")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey",
                    alpha=0.2, label="±10 %")
    ax.set(xscale="log", yscale="log", xlabel="measured peak (GiB)", ylabel="predicted (GiB)",
           title="Predicted vs measured peak memory of a training step")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _e(h: dict, k: str) -> str:
    return "—" if h.get(k) is None else f"{h[k]} %"


def external_text(result: dict) -> list[str]:
    """The published evidence: how many rows enter the joint fit and why the rest do not, each
    cell's leave-one-source-out figures over its screened rows and over all its rows, every
    record's held-out error, and the speed model's classes and held-out ratios."""
    joint, ext_rows = result.get("external"), result.get("external_rows") or []
    out = ["", "## External evidence (published measurements, leave-one-source-out)", ""]
    if not joint:
        return out + ["none"]
    n = result.get("external_counts") or {}
    fws = ", ".join(f"{f} {v:.3f}/{joint['overheads'][f]:.3f}"
                    for f, v in sorted(joint["frameworks"].items()))
    folds = result.get("external_folds") or {}
    priors = sorted({f["prior"] for f in folds.values()})
    out += [f"{n.get('published', '?')} published rows; {n.get('modelled', '?')} are one "
            f"device's peak of a config the memory model has terms for (the rest: see Excluded); "
            f"the screens (mens.calibrate.screens) set {len(joint['screened'])} of those aside, "
            f"so {n.get('fitted', '?')} enter the joint fit. Each source is held out in turn "
            f"with the screens and the prior re-decided on the other sources' rows (priors "
            f"chosen in the folds: {', '.join(f'{p:g}' for p in priors) or '—'}), and every row "
            f"of it is predicted, screened or not.", "",
            f"joint fit: prior {joint['prior']:g} (inner leave-one-source-out); params × "
            f"{joint['params']:.3f}; a mens run: activations × {joint['mens']:.3f}, overhead × "
            f"{joint['overhead']:.3f}, no checkpointing × {joint['nockpt']:.3f} (per framework, "
            f"activations/overhead: {fws})", ""]
    for label, sel in (("screened", [x for x in ext_rows if not x.get("screen")]),
                       ("all rows", ext_rows)):
        e = [abs(x["heldout_pct"]) for x in sel if x["heldout_pct"] is not None]
        if e:
            out.append(f"- held out, {label}: {len(e)} records, median |err| "
                       f"{statistics.median(e):.1f} %, max {max(e):.1f} %")
    out += ["", "| cell | status | records (screened / all) | sources | held-out median "
            "(screened / all) | held-out max (screened / all) | margin | all rows it covers | "
            "targets (≤ 10 % / ≤ 20 %) |", "|---|---|---|---|---|---|---|---|---|"]
    for key, c in sorted(result["cells"].items()):
        h = c.get("heldout") or c.get("external_check")
        if not h:
            continue
        a = h.get("all_rows") or {}
        status = ("external" if c.get("external") else "calibrated (own records)"
                  if c.get("calibrated") else "fitted, not external")
        out.append(f"| {key} | {status} | {h['records']} / {a.get('records', '—')} | "
                   f"{len(c.get('sources') or h['sources'])} | {_e(h, 'median_abs_pct')} / "
                   f"{_e(a, 'median_abs_pct')} | {_e(h, 'max_abs_pct')} / {_e(a, 'max_abs_pct')} "
                   f"| {c['uncertainty']:.1%} | {a.get('covered', '—')} of "
                   f"{a.get('records', '—')} | {'met' if h.get('targets_met') else 'NOT met'} |")
        out += [f"|  | not external: {w} | | | | | | | |" for w in c.get("not_external", [])]
        out += [f"|  | not covered: {x['id']} {x['heldout_pct']:+.1f} % ({x['screen']}) | | | | "
                f"| | | |" for x in a.get("not_covered", [])]
    out += ["", "| record | source | cell | screen | measured GiB | analytic GiB | fitted GiB | "
            "held-out % |", "|---|---|---|---|---|---|---|---|"]
    out += [f"| {x['id']} | {x['source']} | {x['cell']} | {x.get('screen') or ''} | "
            f"{x['measured_bytes'] / 2**30:.2f} | {x['analytic_bytes'] / 2**30:.2f} | "
            f"{x['fitted_bytes'] / 2**30:.2f} | {x['heldout_pct']} |" for x in ext_rows]
    return out + speed_text(result.get("speed") or {})


def speed_text(speed: dict) -> list[str]:
    out = ["", "## Speed model (tokens/s, leave-one-source-out)", ""]
    if speed.get("latency_s_per_layer") is not None:
        out.append(f"- fixed latency per micro-batch step: {1e3 * speed['latency_s_per_layer']:.2f}"
                   f" ms per decoder layer")
    for cls, v in sorted((speed.get("classes") or {}).items()):
        out.append(f"- {cls}: {v['efficiency']:.1%} of dense bf16 TFLOPS, {v['records']} records "
                   f"from {', '.join(v['sources'])}; held-out median {v['heldout_median_pct']} %, "
                   f"max {v['heldout_max_pct']} %")
    q = speed.get("heldout_ratio") or {}
    if q.get("records"):
        per = ", ".join(f"{s} {v:.2f}×" for s, v in q["by_source"].items())
        out.append(f"- held-out predicted / measured tokens/s: median {q['median']:.2f}× over "
                   f"{q['records']} records, {q['within_2x']} within 2×; per source: {per}")
    return out


def report(records, contract, result, out_dir: Path, problems=()) -> dict:

    rs = rows([r for r in records if r.get("kind") != "external"], contract)
    held, fitted = summary(rs, "held_out"), summary(rs, "fit")
    parts = ["# Calibration fit report", "",
             f"{len(records)} records · {len(result['cells'])} cell(s) fitted · "
             f"{len(result['refused'])} refused · {len(result['excluded'])} excluded", ""]
    for key, cell in sorted(result["cells"].items()):
        if cell.get("fitted", {}).get("evidence") == "external":
            continue   # in their own section below
        terms = ", ".join(f"{t} {v['coefficient']:.3f} ± {v['uncertainty']:.3f}"
                          for t, v in cell["terms"].items())
        parts.append(f"- {key}: {'calibrated' if cell['calibrated'] else 'NOT calibrated'}, "
                     f"uncertainty {cell['uncertainty']:.1%} (floor "
                     f"{cell['uncertainty_floor_bytes'] / MiB:.0f} MiB), {len(cell['records'])} "
                     f"records · {terms}")
        for why in cell.get("not_calibrated", []):
            parts.append(f"  - not calibrated: {why}")
    noise = next((c["repeat_noise"] for c in result["cells"].values() if c.get("repeat_noise")), None)
    if noise:
        parts.append(f"- repeated shapes (the measurement's own noise): σ {noise['sigma']:.1%} over "
                     f"{noise['shapes']} shapes × ≥ 2 runs ({noise['records']} records), widest "
                     f"spread {noise['max_spread_pct']:.1f} %; no cell claims less than 2σ")
    parts += [f"- refused: {msg}" for msg in result["refused"].values()]
    parts += ["", "## Held out", "", "```", summary_text(held), split_text(rs), "```", "",
              cell_text(rs, contract), "", table([r for r in rs if r["role"] == "held_out"]), "",
              "## Fit records (in-sample)", "", "```", summary_text(fitted), "```", "",
              table([r for r in rs if r["role"] != "held_out"]), "", "## Excluded", ""]
    parts += [f"- {x['id']} ({x['cell']}): {x['reason']}" for x in result["excluded"]] or ["none"]
    parts += external_text(result)
    parts += ["", "## Problems reading records", ""] + [f"- {p}" for p in problems] or []
    text = "\n".join(parts) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / "fit_report.md", text)
    atomic_write(out_dir / "fit_rows.json", json.dumps(rs, indent=1))
    if rs:
        scatter(rs, out_dir / "fit_scatter.png")
    print(text)
    print(f"mens fit: report in {out_dir / 'fit_report.md'} and {out_dir / 'fit_scatter.png'}")
    return {"held_out": held, "fit": fitted}


def held_out_table(records: str = "calibration/cpu.jsonl", contract: str | None = None) -> dict:
    """Print the held-out error table (mens vs the two rules of thumb) from committed records
    and the committed contract. No training, no torch: for `make bench`."""
    recs, problems = collect([records])
    c = load_contract(str(resolve(contract)) if contract else None)
    rs = [r for r in rows(recs, c) if r["role"] == "held_out"]
    s = summary(rs, "held_out")
    print(table(rs))
    print(summary_text(s))
    print(split_text(rs))
    print(cell_text(rs, c))
    for p in problems:
        print(f"problem: {p}")
    return s
