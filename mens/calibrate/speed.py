"""The speed model's fit: the FLOP rate each kernel class achieves (mens.plan.speed), from the
tokens/s that records measured — published ones (external) and mens's own CUDA sweeps alike.

For a record on a tier with P dense bf16 TFLOPS and bandwidth BW, one token takes
t = 1/tokens_per_s (per device) = c/η + mem (mens.plan.speed.step_terms), so each record implies
η = c / (t − mem). A class's η is the geometric mean over its sources (each source's records
averaged first: a 20-row table must not outvote two others), and its error is leave-one-source-
out: each source's records predicted from the others' η.
"""
from __future__ import annotations

import math
import statistics

from mens.config.options import load_option
from mens.plan.memory import Arch, LaneModel, Shape
from mens.plan.speed import kernel_class, step_terms


def _tier(name: str | None):
    if not name:
        return None
    try:
        return load_option("hw", name)
    except Exception:   # a tier this mens does not have: the record cannot be placed
        return None


def implied(r: dict) -> dict | None:
    """The efficiency a record with tokens/s implies, or None (no rate, tier or TFLOPS)."""
    tier = r.get("tier") or (r.get("hw") or {}).get("name")   # external rows / mens's records
    tps, hw = r.get("tokens_per_s"), _tier(tier)
    if not tps or hw is None or not hw.tflops_bf16 or r.get("backend") != "cuda":
        return None
    lane = LaneModel(**{**r["lane"], "lora_targets": tuple(r["lane"]["lora_targets"])})
    shape = Shape(r["seq_len"], r["micro_batch"], r["checkpointing"], r["packing"])
    compute, memory = step_terms(Arch(**r["arch"]), lane, shape, hw.tflops_bf16,
                                 getattr(hw, "bandwidth_gbs", None))
    t = 1.0 / float(tps)
    if t <= memory:   # faster than the roofline allows: a misread row, said in the report
        return {"id": r["id"], "bad": f"{tps:,.0f} tokens/s beats the tier's bandwidth bound"}
    return {"id": r["id"], "source": r.get("source") or r.get("host", {}).get("hostname"),
            "class": kernel_class(lane.kind), "tier": tier, "tokens_per_s": float(tps),
            "eta": compute / (t - memory), "compute": compute, "memory": memory}


def _pooled(rows: list[dict]) -> float:
    by_src: dict[str, list[float]] = {}
    for x in rows:
        by_src.setdefault(x["source"], []).append(math.log(x["eta"]))
    return math.exp(statistics.mean(statistics.mean(v) for v in by_src.values()))


def fit_speed(records: list[dict], assumed_mfu: float) -> dict:
    """The contract's `speed:` section."""
    rows = [x for x in (implied(r) for r in records) if x and "bad" not in x]
    bad = [x for x in (implied(r) for r in records) if x and "bad" in x]
    classes, table = {}, []
    for cls in sorted({x["class"] for x in rows}):
        mine = [x for x in rows if x["class"] == cls]
        eta = _pooled(mine)
        errs = []
        for x in mine:
            others = [y for y in mine if y["source"] != x["source"]]
            held = _pooled(others) if others else None
            pred = None if held is None else 1.0 / (x["compute"] / held + x["memory"])
            err = None if pred is None else 100 * (pred - x["tokens_per_s"]) / x["tokens_per_s"]
            if err is not None:
                errs.append(abs(err))
            table.append({"id": x["id"], "class": cls, "source": x["source"], "tier": x["tier"],
                          "measured_tokens_per_s": round(x["tokens_per_s"], 1),
                          "implied_efficiency": round(x["eta"], 4),
                          "heldout_tokens_per_s": None if pred is None else round(pred, 1),
                          "heldout_pct": None if err is None else round(err, 1)})
        classes[cls] = {"efficiency": round(eta, 4), "records": len(mine),
                        "sources": sorted({x["source"] for x in mine}),
                        "heldout_median_pct": round(statistics.median(errs), 1) if errs else None,
                        "heldout_max_pct": round(max(errs), 1) if errs else None}
        if not errs:   # one source: nothing to hold out, its η is its own
            classes[cls]["heldout_median_pct"] = classes[cls]["heldout_max_pct"] = None
    return {"assumed_mfu": assumed_mfu, "classes": classes, "records": table,
            "misread": [x["id"] + ": " + x["bad"] for x in bad]}
