"""The speed model's fit: the FLOP rate each kernel class achieves and the fixed latency of a
micro-batch step (mens.plan.speed), from the tokens/s that records measured — published ones
(external) and mens's own CUDA sweeps alike.

For a record on a tier with P dense bf16 TFLOPS and bandwidth BW, a micro-batch step of
T = b·s tokens on one device takes t = T·(c/η + mem) + L·τ (mens.plan.speed.step_terms: c the
compute seconds per token at η = 1, mem the bandwidth-bound seconds per token, L the layers).
η per kernel class and one τ for all are fitted in log space — each source weighing the same
however many rows it has — and each source is then left out in turn: its records predicted
from the others' fit give the held-out error, and the held-out ratio (predicted / measured:
its median over all rows and per source) says which way the model misses. Nothing here is
tuned on the rows a fold holds out: η and τ are the only fitted numbers, refitted per fold.
"""
from __future__ import annotations

import math
import statistics

import numpy as np
from scipy.optimize import least_squares

from mens.config.options import load_option
from mens.errors import ConfigError
from mens.plan.memory import Arch, LaneModel, Shape
from mens.plan.speed import kernel_class, step_terms


def _tier(name: str | None):
    if not name:
        return None
    try:
        return load_option("hw", name)
    except ConfigError:   # a tier this mens does not have: the record cannot be placed
        return None


def point(r: dict) -> dict | None:
    """What the fit needs of a record with tokens/s on a known tier, or None."""
    tier = r.get("tier") or (r.get("hw") or {}).get("name")   # external rows / mens's records
    tps, hw = r.get("tokens_per_s"), _tier(tier)
    if (not tps or hw is None or not hw.tflops_bf16 or r.get("backend") != "cuda"
            or not r.get("seq_len") or not r.get("micro_batch")):
        return None
    lane = LaneModel(**{**r["lane"], "lora_targets": tuple(r["lane"]["lora_targets"])})
    shape = Shape(r["seq_len"], r["micro_batch"], r["checkpointing"], r["packing"])
    compute, memory = step_terms(Arch(**r["arch"]), lane, shape, hw.tflops_bf16,
                                 getattr(hw, "bandwidth_gbs", None))
    return {"id": r["id"], "source": r.get("source") or r.get("host", {}).get("hostname"),
            "class": kernel_class(lane.kind), "tier": tier, "tokens_per_s": float(tps),
            "tokens": shape.seq_len * shape.micro_batch, "layers": r["arch"]["layers"],
            "compute": compute, "memory": memory}


def predict(x: dict, eta: float, tau: float) -> float:
    step = x["tokens"] * (x["compute"] / eta + x["memory"]) + x["layers"] * tau
    return x["tokens"] / step


def solve(points: list[dict], classes: list[str]) -> tuple[dict[str, float], float]:
    """(η per class, τ) minimising log errors, sources weighing alike."""
    per = {}
    for x in points:
        per[x["source"]] = per.get(x["source"], 0) + 1
    w = np.array([1 / math.sqrt(per[x["source"]]) for x in points])
    idx = {c: i for i, c in enumerate(classes)}

    def resid(v):
        eta, tau = np.exp(v[:-1]), math.exp(v[-1])
        pred = np.array([predict(x, eta[idx[x["class"]]], tau) for x in points])
        return w * (np.log(pred) - np.log([x["tokens_per_s"] for x in points]))
    v0 = np.array([math.log(0.4)] * len(classes) + [math.log(1e-3)])
    v = least_squares(resid, v0, loss="soft_l1", f_scale=0.2).x
    return {c: float(math.exp(v[idx[c]])) for c in classes}, float(math.exp(v[-1]))


def fit_speed(records: list[dict], assumed_mfu: float) -> dict:
    """The contract's `speed:` section."""
    points = [x for x in (point(r) for r in records) if x]
    if len({x["source"] for x in points}) < 2:
        return {"assumed_mfu": assumed_mfu}
    classes = sorted({x["class"] for x in points})
    eta, tau = solve(points, classes)
    table, errs = [], {c: [] for c in classes}
    for src in sorted({x["source"] for x in points}):
        rest = [x for x in points if x["source"] != src]
        mine = [x for x in points if x["source"] == src]
        have = sorted({x["class"] for x in rest})
        e2, t2 = solve(rest, have)
        for x in mine:
            held = predict(x, e2[x["class"]], t2) if x["class"] in e2 else None
            err = None if held is None else 100 * (held - x["tokens_per_s"]) / x["tokens_per_s"]
            if err is not None:
                errs[x["class"]].append(abs(err))
            table.append({"id": x["id"], "class": x["class"], "source": src, "tier": x["tier"],
                          "measured_tokens_per_s": round(x["tokens_per_s"], 1),
                          "fitted_tokens_per_s": round(predict(x, eta[x["class"]], tau), 1),
                          "heldout_tokens_per_s": None if held is None else round(held, 1),
                          "heldout_pct": None if err is None else round(err, 1)})
    out = {}
    for c in classes:
        mine = [x for x in points if x["class"] == c]
        e = errs[c]
        out[c] = {"efficiency": round(eta[c], 4), "records": len(mine),
                  "sources": sorted({x["source"] for x in mine}),
                  "heldout_median_pct": round(statistics.median(e), 1) if e else None,
                  "heldout_max_pct": round(max(e), 1) if e else None}
    return {"assumed_mfu": assumed_mfu, "latency_s_per_layer": round(tau, 7), "classes": out,
            "heldout_ratio": ratios(table), "records": table}


def ratios(table: list[dict]) -> dict:
    """Held-out predicted / measured tokens/s: the median over every row a fold could predict
    and per source (below 1: the model under-predicts that source's speed), and how many rows
    land within 2× either way."""
    got = [(x["source"], x["heldout_tokens_per_s"] / x["measured_tokens_per_s"]) for x in table
           if x["heldout_tokens_per_s"]]
    by: dict[str, list[float]] = {}
    for src, q in got:
        by.setdefault(src, []).append(q)
    return {"records": len(got),
            "median": round(statistics.median(q for _, q in got), 3) if got else None,
            "within_2x": sum(0.5 <= q <= 2.0 for _, q in got),
            "by_source": {s: round(statistics.median(v), 3) for s, v in sorted(by.items())}}
