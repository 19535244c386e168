"""CUDA cells fitted on published measurements (records of kind `external`,
mens.calibrate.evidence), validated leave-one-source-out.

Each record's peak is modelled as the analytic components (mens.plan.memory, recomputed from
its architecture, lane and shape) grouped in three terms, fitted jointly over every external
record of a backend (one fit: a cell alone has too few rows to tell its terms apart):

    peak ≈ p · params  +  a_framework · activations  +  o · overhead

params: weights, trainable, gradients, optimizer — counted exactly, so p is held at 1 (a fitted
p < 1 traded weights for a larger intercept, under-predicting the largest models); activations: everything that grows with b·s (saved activations,
checkpoints, logits) — where frameworks differ most (torch.compile fuses, Unsloth offloads the
checkpoints, a chunked loss keeps no full logits), so each framework gets its own coefficient:
the *framework gap* is a term the fit estimates, not a fudge; o: the intercept (CUDA context,
workspaces). A mens run gets the coefficient of the frameworks built as mens is (transformers +
PEFT: BASE_FRAMEWORKS), or all frameworks' median when none of them has a record.

Validation: each source is left out in turn and everything a fit decides from measured peaks
is decided again without it — the screens (mens.calibrate.screens) on the remaining rows, the
prior's strength by an inner leave-one-source-out over them (PRIORS), the coefficients and the
no-checkpointing factor — then every row of the held-out source is predicted (with its
framework's coefficient when other sources of that framework remain, else the mens one): the
error a source nobody fitted on sees. Rows the screens leave out are predicted too: the report
gives the screened errors and the all-rows errors side by side. Per cell: records, sources,
held-out median and max error of both; the cell's margin is the worst held-out
under-prediction of its screened rows, so it covers every one of them, and the cell says how
many of all its rows it covers and which it does not, with the screen that set each aside.
A cell is `external` with ≥ 3 records from ≥ 2 sources and a margin below the uncalibrated
one; else it keeps the fit's coefficients under the uncalibrated margin, and says why. Whether
its held-out errors meet the accuracy targets (median ≤ 10 %, max ≤ 20 %) is reported beside
the status, not folded into it.
"""
from __future__ import annotations

import datetime as dt
import statistics

import numpy as np
from scipy.optimize import least_squares

from mens.calibrate.records import record_components
from mens.calibrate.screens import screen
from mens.plan.memory import model_digest

PARAMS = ("weights", "trainable", "gradients", "optimizer")
ACTS = ("activations", "large_activations", "checkpoints", "logits", "packing_mask", "retention")
# Stacks built as mens is: transformers models + PEFT adapters (+ a Trainer or a loop)
BASE_WORDS = ("transformers", "peft", "trl", "axolotl", "llama-factory", "llamafactory",
              "ms-swift", "accelerate")
# Stacks of their own (their own model code, kernels or offloading)
OWN_WORDS = (("torchtune", "torchtune"), ("lit-gpt", "litgpt"), ("litgpt", "litgpt"),
             ("unsloth", "unsloth"), ("fsdp_qlora", "answerai-fsdp-qlora"))
U_MIN = 0.02
# the pull of each coefficient toward the analytic 1 (0.05: as one record's 5 % error would
# pull it): chosen per fit among these by leave-one-source-out over that fit's own rows
PRIORS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
MIN_SOURCES, MIN_RECORDS = 2, 3
TARGET = {"median_abs_pct": 10.0, "max_abs_pct": 20.0}   # issue #26's accuracy targets


def framework_key(text: str) -> str:
    """A source's free-text framework → the stack whose activation coefficient it shares:
    `mens-like` for transformers + PEFT stacks, else the stack's own name."""
    t = text.lower()
    for word, key in OWN_WORDS:
        if t.startswith(word) or f" {word}" in t and not any(t.startswith(b) for b in BASE_WORDS):
            return key
    if any(b in t for b in BASE_WORDS):
        return "mens-like"
    return t.split()[0] if t.split() else "unknown"


def terms(r: dict, contract) -> tuple[float, float, float, int]:
    """(params, activations, overhead bytes, 1 without checkpointing) of a record."""
    c = record_components(r, contract)
    return (float(sum(c[k] for k in PARAMS)), float(sum(c.get(k, 0) for k in ACTS)),
            float(c["overhead"]), 0 if r["checkpointing"] else 1)


def _fw(r: dict) -> str:
    return framework_key(r["framework"])


def solve(recs: list[dict], cols: list[tuple], prior: float = 0.05) -> dict:
    """Per framework a and o, and g — how much of its count a run without checkpointing keeps
    of the L layers' activations, relative to one with (shared: the same kernels keep the same
    tensors whoever calls them) — all ≥ 0 with p held at 1, minimising relative errors under a
    soft-L1 loss (a source's quirk pulls less than a square would), each source weighing the
    same however many rows it has. A mens run gets the mens-like frameworks' a and o (all
    frameworks' medians without any)."""
    fws = sorted({_fw(r) for r in recs})
    k = len(fws)
    f_of = np.array([fws.index(_fw(r)) for r in recs])
    P, A, O, N = (np.array([c[j] for c in cols], float) for j in range(4))
    y = np.array([r["measured_peak_bytes"] for r in recs], float)
    per_source: dict[str, int] = {}
    for r in recs:
        per_source[r["source"]] = per_source.get(r["source"], 0) + 1
    w = np.array([1.0 / np.sqrt(per_source[r["source"]]) for r in recs]) / y

    def resid(x):
        a, o, g = x[:k][f_of], x[k:2 * k][f_of], x[-1]
        pred = P + a * np.where(N > 0, g, 1.0) * A + o * O
        # a framework seen in few rows (or one model) cannot tell its terms apart: each
        # coefficient is pulled toward the analytic 1 (how hard: `prior`, chosen by choose())
        return np.concatenate([w * (pred - y), prior * (x - 1.0)])
    x = least_squares(resid, np.ones(2 * k + 1), bounds=(0, np.inf), loss="soft_l1",
                      f_scale=0.05).x
    acts = {f: float(v) for f, v in zip(fws, x[:k])}
    over = {f: float(v) for f, v in zip(fws, x[k:2 * k])}
    return {"params": 1.0, "frameworks": acts, "overheads": over, "nockpt": float(x[-1]),
            "mens": acts.get("mens-like", float(statistics.median(acts.values()))),
            "overhead": over.get("mens-like", float(statistics.median(over.values()))),
            "prior": prior}


def predict(col: tuple, fit: dict, framework: str | None) -> float:
    p, a, o, nockpt = col
    act = fit["frameworks"].get(framework, fit["mens"]) if framework else fit["mens"]
    over = fit["overheads"].get(framework, fit["overhead"]) if framework else fit["overhead"]
    return fit["params"] * p + act * (fit["nockpt"] if nockpt else 1.0) * a + over * o


def _loso(recs: list[dict], cols: list[tuple], fit_on) -> tuple[list, dict]:
    """Each record's prediction by `fit_on(rows, cols)` of the other sources' rows (None: fewer
    than 3 of them), and those fits by the source they left out."""
    out: list[float | None] = [None] * len(recs)
    fits = {}
    for src in sorted({r["source"] for r in recs}):
        keep = [i for i, r in enumerate(recs) if r["source"] != src]
        if len(keep) < 3:
            continue
        sub = fit_on([recs[i] for i in keep], [cols[i] for i in keep])
        if sub is None:
            continue
        fits[src] = sub
        for i, r in enumerate(recs):
            if r["source"] == src:
                out[i] = predict(cols[i], sub, _fw(r))
    return out, fits


def choose(recs: list[dict], cols: list[tuple]) -> tuple[float, dict[float, float]]:
    """The prior among PRIORS whose inner leave-one-source-out over these rows errs least (mean
    over sources of the mean |log(predicted / measured)|: sources weigh alike), and each one's
    score. With fewer than two sources nothing can be held out: 0.05 (one record's 5 % pull)."""
    if len({r["source"] for r in recs}) < 2:
        return 0.05, {}
    y = np.array([r["measured_peak_bytes"] for r in recs], float)
    scores = {}
    for p in PRIORS:
        q, _ = _loso(recs, cols, lambda rs, cs, p=p: solve(rs, cs, p))
        per: dict[str, list[float]] = {}
        for r, m, v in zip(recs, y, q):
            if v is not None:
                per.setdefault(r["source"], []).append(abs(float(np.log(v / m))))
        scores[p] = float(np.mean([np.mean(e) for e in per.values()])) if per else float("inf")
    return min(PRIORS, key=lambda p: scores[p]), scores


def fit_rows(recs: list[dict], cols: list[tuple]) -> dict | None:
    """Everything one fit decides from these rows alone: the screens, the prior, the
    coefficients (None when the screens leave fewer than 3 rows)."""
    out = screen(recs, cols)
    keep = [i for i, r in enumerate(recs) if r["id"] not in out]
    if len(keep) < 3:
        return None
    rs, cs = [recs[i] for i in keep], [cols[i] for i in keep]
    prior, scores = choose(rs, cs)
    return {**solve(rs, cs, prior), "prior_scores": scores, "screened": out}


def fit_external(records: list[dict], contract, margin: float) -> dict:
    """{cells: {key: cell}, fit: the joint fit, rows: per-record table, screened: {id: (screen,
    why)}, folds: {source: what its fold decided}} over `ok` external records of one-device
    peaks; {} when there are none. Rows the screens leave out of the joint fit are marked
    `skipped` with their reason (the fit's exclusions list them)."""
    recs = [r for r in records if r.get("kind") == "external" and r.get("status") == "ok"]
    if len(recs) < 4:
        return {}
    cols = [terms(r, contract) for r in recs]
    joint = fit_rows(recs, cols)
    if joint is None:
        return {}
    loo, subs = _loso(recs, cols, fit_rows)
    joint["spread"] = {k: max((abs(s[k] - joint[k]) for s in subs.values()), default=0.0)
                       for k in ("mens", "overhead", "nockpt")}
    scr = joint["screened"]
    rows = []
    for r, col, q in zip(recs, cols, loo):
        m = r["measured_peak_bytes"]
        fitted = predict(col, joint, _fw(r))
        name, why = scr.get(r["id"], (None, None))
        rows.append({"id": r["id"], "source": r["source"], "cell": r["cell"],
                     "framework": r["framework"], "gpu": r["gpu"], "model": r["rung"]["name"],
                     "measured_bytes": int(m), "fitted_bytes": int(fitted),
                     "analytic_bytes": int(sum(col[:3])), "screen": name,
                     "heldout_bytes": None if q is None else int(q),
                     "heldout_pct": None if q is None else round(100 * (m - q) / q, 2)})
        if why:   # said in the fit's exclusions (mens.calibrate.fit)
            r["status"] = "skipped"
            r["reason"] = (f"screened out of the joint fit ({name}): {why}; its held-out error "
                           f"counts in the all-rows figures")
    cells = {}
    for key in sorted({x["cell"] for x in rows if not x["screen"]}):
        cells[key] = _cell(key, [x for x in rows if x["cell"] == key], joint, contract, margin)
    folds = {s: {"prior": f["prior"], "screened": sorted(f["screened"])} for s, f in subs.items()}
    counts = {"published": sum(r.get("kind") == "external" for r in records),
              "modelled": len(recs), "fitted": len(recs) - len(scr)}
    return {"cells": cells, "fit": joint, "rows": rows, "folds": folds, "counts": counts,
            "screened": {i: list(v) for i, v in scr.items()},
            "inconsistent": {f"{r['source']} / {r['rung']['name']}": scr[r["id"]][1]
                             for r in recs if scr.get(r["id"], ("",))[0] == "inconsistent"}}


def _errors(rows: list[dict]) -> dict:
    errs = [x["heldout_pct"] for x in rows if x["heldout_pct"] is not None]
    med = float(statistics.median(abs(e) for e in errs)) if errs else None
    mx = max((abs(e) for e in errs), default=None)
    return {"records": len(errs), "median_abs_pct": None if med is None else round(med, 2),
            "max_abs_pct": None if mx is None else round(mx, 2),
            "worst_under_prediction_pct": round(max(errs + [100 * U_MIN]), 2),
            "targets_met": bool(errs) and med <= TARGET["median_abs_pct"]
            and mx <= TARGET["max_abs_pct"]}


def _cell(key: str, rows: list[dict], joint: dict, contract, margin: float) -> dict:
    """rows: every row of the cell, screened or not. Its margin is what its screened rows'
    held-out errors earned: the worst under-prediction among them (at least 2 %)."""
    kept = [x for x in rows if not x["screen"]]
    screened, every = _errors(kept), _errors(rows)
    sources = sorted({x["source"] for x in kept})
    u = float(np.ceil(screened["worst_under_prediction_pct"] / 100 * 200) / 200)
    out = [x for x in rows if x["heldout_pct"] is not None and x["heldout_pct"] > 100 * u]
    every["covered"] = every["records"] - len(out)
    every["not_covered"] = [{"id": x["id"], "heldout_pct": x["heldout_pct"], "screen": x["screen"]}
                            for x in out]
    why = []
    if len(sources) < MIN_SOURCES:
        why.append(f"records from {len(sources)} source(s) < {MIN_SOURCES}")
    if len(kept) < MIN_RECORDS:
        why.append(f"{len(kept)} record(s) < {MIN_RECORDS}")
    if not screened["records"]:
        why.append("no record could be held out")
    elif u >= margin:
        why.append(f"the margin its held-out errors earn ({u:.1%}) is no smaller than the "
                   f"uncalibrated {margin:.0%}")
    coef = {k: round(joint["params"], 6) for k in PARAMS}
    act = joint["mens"] * (joint["nockpt"] if "/nockpt/" in key else 1.0)
    coef |= {k: round(act, 6) for k in ACTS}
    coef["overhead"] = round(joint["overhead"], 6)
    cell = {
        "calibrated": False, "external": not why, "uncertainty": u,
        "uncertainty_floor_bytes": 0, "model_digest": model_digest(contract["model"]),
        "coefficients": coef,
        # each term's uncertainty: how far it moves when one source is left out
        "terms": {"params": {"coefficient": coef["weights"], "uncertainty": 0.0},
                  "activations": {"coefficient": coef["activations"],
                                  "uncertainty": round(joint["spread"]["mens"], 6)},
                  "overhead": {"coefficient": coef["overhead"],
                               "uncertainty": round(joint["spread"]["overhead"], 6)}},
        "frameworks": {f: round(v, 4) for f, v in joint["frameworks"].items()},
        "sources": sources,
        "heldout": {"method": "leave-one-source-out, screens and prior re-decided in each fold",
                    **screened,
                    "margin_covers": f"every screened held-out record ({screened['records']}); "
                                     f"{every['covered']} of all {every['records']}",
                    "all_rows": every},
        "records": rows,
        "fitted": {"date": dt.date.today().isoformat(), "n_records": len(kept),
                   "evidence": "external"},
    }
    if why:
        cell["not_external"] = why
    return cell


def merge_external(cells: dict, ext: dict) -> None:
    """Cells fitted from mens's own measurements (a GPU calibration sweep) outrank published
    evidence: they keep their fit, and the published records' held-out figures ride along as a
    check. Every other cell the published records reach is theirs."""
    for key, cell in (ext.get("cells") or {}).items():
        if key in cells:
            cells[key]["external_check"] = {"sources": cell["sources"], **cell["heldout"]}
        else:
            cells[key] = cell
