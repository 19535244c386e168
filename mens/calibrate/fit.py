"""`python -m mens.fit`: calibration records → fitted cells of the memory contract + a report.

Per cell (backend/lane/checkpointing/precision), measured peaks are fitted by weighted least
squares as a sum of the analytic model's components (mens/memory.py, recomputed from each
record's architecture and shape), grouped into the terms records can tell apart:
  params        weights + trainable + gradients + optimizer  — moves with the rung only
  activations   saved activations (heap-sized tensors on CPU) — b·s·(L·dims), b·s²
  large_activations  those of mmapped tensors (CPU; under train.heap=fixed the whole set once
                the (b·s, h) tensors reach 8 MiB) — rarely in a fit: then kept at 1
  checkpoints   each layer's input under checkpointing        — b·s·L·h
  logits        logits + fp32 loss copies                    — b·s·vocab
  packing_mask  the 4-D bool mask                            — b·s²
  retention     what the allocator keeps (CPU: ckpt recompute, QLoRA dequant)
  overhead      the intercept: runtime, allocator, Lightning and logger bookkeeping
A term below 1 % of every record's prediction cannot be told from noise: it keeps coefficient 1;
a term fitted negative is not live at the cell's peak (e.g. the full lane's logits, freed before
the optimizer step that peaks): it is held at 0 and the rest refitted — both said in the cell.
On CPU the coefficients also carry glibc's habit of keeping freed heap (activations ~2×). Each
record weighs by its error relative to max(measured, 512 MiB), the acceptance's own yardstick.
The cell's uncertainty comes from leave-one-out errors, not in-sample residuals, and is never
below 2σ of repeated measurements of one shape (the allocator's own run-to-run noise); each
term's stated uncertainty (3 standard errors) likewise uses a residual variance no smaller
than that noise, so a re-run of the sweep re-derives coefficients inside it.
Records of several processes (world_size > 1: one device's peak, the largest rank's) fit cells
of their own, backend/lane/ckpt/precision/strategy, with one more term, `communication`. A term
that such records cannot vary (params and communication when every record is one rung) is held:
params at the one-device cell's coefficient (fitted from these records or in the contract),
communication at 1 — the overhead takes the rest; said in the cell's `fixed`.
Only `ok` records of role `fit` enter a fit; every other record is
listed with the reason it was left out. A cell whose records cannot determine its coefficients
is refused, by name, with what is missing.
"""
from __future__ import annotations

import datetime as dt
import json

import numpy as np

from mens.calibrate.records import (BIG, MULTI_TERMS, TERMS, MiB,  # noqa: F401
                                    collect, one_device_key, other_paths, predicted_raw,
                                    record_components, resolve, term_columns, terms_for,
                                    why_excluded, world_size)
from mens.calibrate.external import fit_external, merge_external
from mens.calibrate.speed import fit_speed
from mens.plan.memory import min_margin, model_digest, usable_cell, with_uncertainty

MIN_SHARE = 0.01        # below this share of every record's prediction a term is not fitted
U_MIN = 0.02            # no cell claims better than ±2 %
U_CALIBRATED = 0.10     # a cell counts as calibrated at or under this uncertainty
FLOOR_CALIBRATED = 64 * MiB
MIN_BIG = 3             # records ≥ 512 MiB whose leave-one-out error the uncertainty rests on


class Underdetermined(ValueError):
    pass


# --- the fit -------------------------------------------------------------------------------
def repeat_noise(records: list[dict]) -> dict[str, dict]:
    """The measurement's own noise, per backend: the pooled relative standard deviation of
    repeated `ok` fit records of one shape (same cell, architecture, seq_len, micro_batch) with
    peaks ≥ 512 MiB. On CPU glibc's heap makes two runs of one shape differ by a few percent;
    no fit can promise better than that, so a cell's uncertainty is at least 2σ of it."""
    groups: dict[tuple, list[float]] = {}
    for r in records:
        if r.get("status") == "ok" and r.get("role") == "fit":
            arch = {"family": "qwen3", **r["arch"]}   # records before families were qwen3
            key = (r["cell"], json.dumps(arch, sort_keys=True), r["seq_len"], r["micro_batch"],
                   r["packing"])
            groups.setdefault(key, []).append(float(r["measured_peak_bytes"]))
    out: dict[str, dict] = {}
    for key, ys in groups.items():
        if len(ys) < 2 or min(ys) < BIG:
            continue
        m = float(np.mean(ys))
        o = out.setdefault(noise_key(key[0]), {"ss": 0.0, "dof": 0, "shapes": 0, "max_pct": 0.0})
        o["ss"] += sum(((y - m) / m) ** 2 for y in ys)
        o["dof"] += len(ys) - 1
        o["shapes"] += 1
        o["max_pct"] = max(o["max_pct"], 100 * (max(ys) - min(ys)) / m)
    return {b: {"sigma": round(float(np.sqrt(o["ss"] / o["dof"])), 5), "shapes": o["shapes"],
                "records": o["dof"] + o["shapes"], "max_spread_pct": round(o["max_pct"], 2)}
            for b, o in out.items()}


def noise_key(cell: str) -> str:
    """Whose run-to-run noise a cell's records share: the backend's (one device), the backend's
    under that strategy (several processes: their own allocators and threads)."""
    parts = cell.split("/")
    return parts[0] if len(parts) <= 4 else f"{parts[0]}/{parts[4]}"


def fit_cell(key: str, recs: list[dict], contract, extrapolation: bool = True,
             noise: dict | None = None, inherit: dict | None = None) -> dict:
    """Weighted least squares of one cell. Raises Underdetermined with what is missing.
    The uncertainty pools leave-one-out errors with an extrapolation check: each rung's
    longest seq_len predicted by a fit without those records (when the rest determine one).
    inherit: a multi-device cell's one-device cell (its params coefficient, see the doc)."""
    comps = [record_components(r, contract) for r in recs]
    cols = [term_columns(c) for c in comps]
    y = np.array([r["measured_peak_bytes"] for r in recs], float)
    total = np.array([sum(c.values()) for c in cols], float)
    free, fixed, held = [], {}, {}                         # held: term → coefficient kept
    multi = any(world_size(r) > 1 for r in recs)
    for t in cols[0]:
        share = max(c[t] / tot for c, tot in zip(cols, total))
        col = np.array([c[t] for c in cols], float)
        if t != "overhead" and share < MIN_SHARE:
            fixed[t] = f"below {MIN_SHARE:.0%} of every record's prediction (at most {share:.2%}): kept at 1"
            held[t] = 1.0
        elif multi and t in ("params", "communication") and np.ptp(col) <= 1e-9 * col.max():
            held[t] = float(((inherit or {}).get("terms") or {}).get(t, {}).get("coefficient", 1.0)) \
                if t == "params" else 1.0
            src = (f"the one-device cell's coefficient {held[t]:.4f}" if t == "params" and
                   inherit else "1 (analytic)")
            fixed[t] = (f"the same in every record (one rung): cannot be told from the overhead, "
                        f"so held at {src}")
        else:
            free.append(t)
    if multi:
        _hold_inseparable(cols, free, held, fixed, inherit)
    w = 1.0 / np.maximum(y, BIG)
    while True:   # least squares; a term fitted negative is held at 0 and the rest refitted
        X = np.array([[c[t] for t in free] for c in cols], float)
        offset = np.array([sum(c[t] * v for t, v in held.items()) for c in cols], float)
        _check_determined(key, recs, X, free)
        A, b = X * w[:, None], (y - offset) * w
        beta, *_ = np.linalg.lstsq(A, b, rcond=None)
        neg = [(v, t) for t, v in zip(free, beta) if v < 0 and t != "overhead"]
        if not neg:
            break
        v, t = min(neg)
        fixed[t] = (f"fitted {v:.3f} < 0: a component cannot give memory back, so it is held at "
                    f"0 (it is not live at this cell's peak)")
        held[t] = 0.0
        free.remove(t)
    pred = X @ beta + offset
    n, k = A.shape
    resid = b - A @ beta                                   # weighted residuals
    cov_unscaled = np.linalg.pinv(A.T @ A)
    # weighted residuals are relative errors (from 512 MiB up): their variance cannot be below
    # the measurement's own run-to-run noise, even where the fit's records happen to agree
    s2 = max(float(resid @ resid) / max(n - k, 1), (noise or {}).get("sigma", 0.0) ** 2)
    se = np.sqrt(np.maximum(np.diag(cov_unscaled) * s2, 0))
    lev = np.einsum("ij,jk,ik->i", A, cov_unscaled, A)     # hat-matrix diagonal
    # leave-one-out predictions (PRESS): what each record would see from a fit without it
    checked = lev < 0.99           # a record with leverage ~1 is its own fit: nothing to check
    loo = np.where(checked, y - (y - pred) / np.maximum(1 - lev, 1e-9), pred)
    ext = _longest_out(key, recs, contract, inherit) if extrapolation else []
    u, floor = _uncertainty(np.concatenate([y[checked], [m for _, m, _ in ext]]),
                            np.concatenate([loo[checked], [q for _, _, q in ext]]),
                            2 * noise["sigma"] if noise else 0.0)
    n_big = int((checked & (y >= BIG)).sum())
    coef = dict(held) | {t: float(v) for t, v in zip(free, beta)}
    return _plain({
        # calibrated: small enough an uncertainty, checked on enough records that matter
        "calibrated": bool(u <= U_CALIBRATED and floor <= FLOOR_CALIBRATED and n_big >= MIN_BIG),
        "uncertainty": u, "uncertainty_floor_bytes": floor, "checked_records_512mib": n_big,
        "repeat_noise": noise,
        "model_digest": model_digest(contract["model"]),
        "coefficients": {c: round(coef[t], 6) for t, cs in terms_for(comps[0]).items()
                         if t in coef for c in cs},
        "terms": {t: {"coefficient": round(coef[t], 6), "stderr": round(float(s), 6),
                      "uncertainty": round(float(3 * s), 6)} for t, s in zip(free, se)},
        "fixed": fixed,
        "records": [{"id": r["id"], "rung": r["rung"]["name"], "seq_len": r["seq_len"],
                     "micro_batch": r["micro_batch"], "measured_bytes": int(m),
                     "fitted_bytes": int(p), "residual_pct": round(100 * (m - p) / p, 2),
                     "loo_residual_pct": round(100 * (m - q) / q, 2) if lev_i < 0.99 else None}
                    for r, m, p, q, lev_i in zip(recs, y, pred, loo, lev)],
        "extrapolation": [{"id": r["id"], "measured_bytes": int(m), "predicted_bytes": int(q),
                           "residual_pct": round(100 * (m - q) / q, 2)} for r, m, q in ext],
    })


def _hold_inseparable(cols, free: list[str], held: dict, fixed: dict, inherit) -> None:
    """Several processes, one rung: terms that move together with the others (logits and the
    CPU heap's retention grow with b·s like the activations) cannot be told apart; the one-device
    cell, fitted across rungs, can. Hold them at its coefficients (1 without one), the latest in
    TERMS first, until the rest are separable; activations and the overhead stay fitted."""
    def explained(t: str) -> bool:
        X = np.array([[c[u] for u in free] for c in cols], float)
        X = X / np.maximum(np.abs(X).max(axis=0), 1)
        j = free.index(t)
        rest = np.delete(X, j, axis=1)
        r = X[:, j] - rest @ np.linalg.lstsq(rest, X[:, j], rcond=None)[0]
        return float(np.abs(r).max()) < 1e-6
    for t in reversed(list(cols[0])):
        if t in free and t not in ("activations", "overhead") and explained(t):
            held[t] = float(((inherit or {}).get("terms") or {}).get(t, {}).get("coefficient", 1.0))
            fixed[t] = (f"moves with the other terms in every record (one rung): held at "
                        f"{'the one-device cell' if inherit else 'the analytic'} coefficient "
                        f"{held[t]:.4f}")
            free.remove(t)


def _longest_out(key: str, recs: list[dict], contract,
                 inherit: dict | None = None) -> list[tuple[dict, float, float]]:
    """(record, measured, predicted) for each rung's longest seq_len, from a fit without them."""
    longest = {}
    for r in recs:
        longest[r["rung"]["name"]] = max(longest.get(r["rung"]["name"], 0), r["seq_len"])
    out = [r["seq_len"] == longest[r["rung"]["name"]] for r in recs]
    try:
        sub = fit_cell(key, [r for r, o in zip(recs, out) if not o], contract, extrapolation=False,
                       inherit=inherit)
    except Underdetermined:
        return []
    return [(r, float(r["measured_peak_bytes"]), float(predicted_raw(r, sub, contract)))
            for r, o in zip(recs, out) if o]


def _plain(obj):
    """numpy scalars → Python numbers, so the cell dumps as plain YAML."""
    return json.loads(json.dumps(obj, default=lambda o: o.item()))


def _check_determined(key: str, recs: list[dict], X: np.ndarray, free: list[str]) -> None:
    n, k = X.shape
    rungs = sorted({r["rung"]["name"] for r in recs})
    if n < k + 1:
        raise Underdetermined(
            f"cell {key}: {n} record(s) for {k} coefficients ({', '.join(free)}): a fit needs at "
            f"least {k + 1}. Add {k + 1 - n} more shape(s) of this cell (other seq_len, "
            f"micro_batch or rung).")
    scaled = X / np.maximum(np.abs(X).max(axis=0), 1)
    for j, t in enumerate(free):
        if t == "overhead":
            continue
        if np.ptp(scaled[:, j]) < 1e-9:
            hint = (f"every record is rung {rungs[0]}: add records from another rung"
                    if t == "params" else "add records whose shapes change it")
            raise Underdetermined(f"cell {key}: term `{t}` does not vary across the {n} records "
                                  f"({hint}), so it cannot be told from the overhead.")
    sv = np.linalg.svd(scaled, compute_uv=False)
    if sv[-1] < 1e-6 * sv[0]:
        others = []
        for j, t in enumerate(free):   # which term the rest already explain
            rest = np.delete(scaled, j, axis=1)
            r = scaled[:, j] - rest @ np.linalg.lstsq(rest, scaled[:, j], rcond=None)[0]
            if np.abs(r).max() < 1e-6:
                others.append(t)
        raise Underdetermined(
            f"cell {key}: terms {', '.join(others) or 'of the model'} move together across the "
            f"{n} records (rungs: {', '.join(rungs)}), so their coefficients cannot be told apart: "
            f"add records from another rung or with other seq_len × micro_batch.")


def _uncertainty(y: np.ndarray, loo: np.ndarray, repeat: float = 0.0) -> tuple[float, int]:
    """(u, floor): a measurement should stay under prediction + max(u·prediction, floor).
    u from leave-one-out errors of records ≥ 512 MiB (the worst, or 2·RMS, whichever is
    larger), at least 2 % and at least `repeat` (2σ of repeated measurements of one shape);
    floor covers what u misses on smaller records."""
    big = y >= BIG
    e = (y - loo) / loo
    u = U_MIN
    if not len(y):
        return 1.0, 0                                      # nothing could be checked
    if big.any():
        u = max(U_MIN, repeat, float(e[big].max()), float(2 * np.sqrt(np.mean(e[big] ** 2))))
    u = float(np.ceil(u * 200) / 200)                      # up to the next 0.5 %
    miss = y - loo * (1 + u)
    floor = int(np.ceil(max(0.0, float(miss.max())) / MiB)) * MiB
    return u, floor


def fit(records: list[dict], contract) -> dict:
    """{cells: {key: cell}, refused: {key: message}, excluded: [{id, cell, reason}],
    external: the joint fit of published records (mens.calibrate.external), speed: the speed
    model (mens.calibrate.speed)}."""
    published = [r for r in records if r.get("kind") == "external"]
    records = [r for r in records if r.get("kind") != "external"]
    by_cell, excluded = {}, []
    records = [r for r in records if not other_paths(r, contract)] + [
        dict(r, status="other_paths", reason=other_paths(r, contract)) for r in records
        if other_paths(r, contract)]   # another path's records are counted, never fitted
    for r in records:
        why = why_excluded(r)
        if why:
            excluded.append({"id": r["id"], "cell": r["cell"], "reason": why})
        else:
            by_cell.setdefault(r["cell"], []).append(r)
    cells, refused, noise = {}, {}, repeat_noise(records)
    for key, recs in sorted(by_cell.items()):   # a one-device key sorts before its multi ones
        one = one_device_key(key)
        inherit = None if one == key else cells.get(one) or usable_cell(contract, one)
        try:
            cells[key] = fit_cell(key, recs, contract, noise=noise.get(noise_key(key)),
                                  inherit=inherit)
        except Underdetermined as e:
            refused[key] = str(e)
            continue
        cells[key]["excluded"] = [x for x in excluded if x["cell"] == key]
        held = [r for r in records if r["cell"] == key and r.get("role") == "held_out"
                and r.get("status") in ("ok", "lower_bound")]
        cells[key]["validation"] = validate(cells[key], held, contract)
        cells[key]["fitted"] = {"date": dt.date.today().isoformat(), "n_records": len(recs),
                                "hosts": sorted({r["host"]["hostname"] for r in recs}),
                                "versions": recs[0]["versions"]}
    for x in excluded:   # a lower bound the fit predicts under is a contradiction: say it
        r = next(r for r in records if r["id"] == x["id"])
        cell = cells.get(x["cell"])
        if r.get("status") == "lower_bound" and cell:
            p = predicted_raw(r, cell, contract)
            x["reason"] += (f"; fitted prediction {p / MiB:,.0f} MiB "
                            f"{'≥' if p >= r['measured_peak_bytes'] else '< (contradiction)'} "
                            f"bound {r['measured_peak_bytes'] / MiB:,.0f} MiB")
    ext = fit_external(published, contract, min_margin(contract))   # may mark some skipped
    merge_external(cells, ext)
    excluded += [{"id": r["id"], "cell": r["cell"], "reason": r["reason"]} for r in published
                 if r.get("status") != "ok"]
    speed = fit_speed(records + published, contract["speed"]["assumed_mfu"])
    return {"cells": cells, "refused": refused, "excluded": excluded,
            "external": ext.get("fit"), "external_rows": ext.get("rows", []),
            "external_counts": ext.get("counts"), "external_folds": ext.get("folds"),
            "speed": speed}


def validate(cell: dict, held: list[dict], contract) -> dict:
    """Held-out records test a fitted cell and never enter it. The cell counts as calibrated
    only if each lies inside prediction + uncertainty (a lower bound too) and, for `ok` ones,
    within 10 % from 512 MiB (64 MiB below). A cell that fails keeps its coefficients — still
    the best estimate — but the planner gives it the uncalibrated margin."""
    rows, bad = [], []
    for r in held:
        m, p = r["measured_peak_bytes"], predicted_raw(r, cell, contract)
        peak = with_uncertainty(p, cell["uncertainty"], cell["uncertainty_floor_bytes"])
        err = 100 * (p - m) / m
        off = (abs(err) > 100 * U_CALIBRATED if m >= BIG else abs(p - m) > FLOOR_CALIBRATED)
        row = {"id": r["id"], "status": r["status"], "measured_bytes": int(m),
               "predicted_bytes": int(p), "error_pct": round(err, 2), "inside": m <= peak}
        rows.append(row)
        if m > peak:
            bad.append(f"{r['id']} measured {m / MiB:,.0f} MiB > {peak / MiB:,.0f} MiB "
                       f"(prediction + uncertainty){' [a lower bound]' if r['status'] != 'ok' else ''}")
        elif r["status"] == "ok" and off:
            bad.append(f"{r['id']} off by {err:+.1f} % ({(p - m) / MiB:+,.0f} MiB)")
    passed = None if not rows else not bad
    if bad and cell["calibrated"]:
        cell["calibrated"] = False
    if not cell["calibrated"]:
        why = []
        if cell["uncertainty"] > U_CALIBRATED:
            why.append(f"uncertainty {cell['uncertainty']:.1%} > {U_CALIBRATED:.0%}")
        if cell["uncertainty_floor_bytes"] > FLOOR_CALIBRATED:
            why.append(f"floor {cell['uncertainty_floor_bytes'] / MiB:.0f} MiB > 64 MiB")
        if cell["checked_records_512mib"] < MIN_BIG:
            why.append(f"{cell['checked_records_512mib']} checked records ≥ 512 MiB < {MIN_BIG}")
        why += [f"held out: {b}" for b in bad]
        cell["not_calibrated"] = why
    return {"passed": passed, "records": rows}


# --- the contract file ---------------------------------------------------------------------
