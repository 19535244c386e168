"""Calibration records (what `mens.calibrate` writes) as `mens.fit` and its report read them:
collecting them from files, dirs and globs, the analytic model's components for a record's
shape under the current contract (one device's, of world_size), the terms a fit tells apart,
why a record is left out — and the readings of several ranks merged into one device's record
(merge_ranks, for mens.calibrate.measure).
"""
from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Mapping

from mens.calibrate.evidence import is_external, to_record
from mens.plan.memory import Arch, LaneModel, Shape, components, predict
from mens.resources import EVIDENCE_DIR
from mens.run.rundir import RunDir

MiB = 2**20
BIG = 512 * MiB         # relative errors count from here; below, errors are absolute
TERMS = {"params": ("weights", "trainable", "gradients", "optimizer"),
         "activations": ("activations",), "large_activations": ("large_activations",),
         "checkpoints": ("checkpoints",),
         "logits": ("logits",),
         "packing_mask": ("packing_mask",), "retention": ("retention",),
         "overhead": ("overhead",)}
# one device of several (world_size > 1): DDP's gradient buckets / FSDP2's gathered layers
MULTI_TERMS = {**TERMS, "communication": ("communication",)}


def terms_for(comps: Mapping) -> dict[str, tuple[str, ...]]:
    """The fit's terms over a record's components. An objective that samples in its step (grpo,
    mens.plan.memory.sampling) adds components only its records have: its reference copy is
    weights (params), its oracle processes a constant beside the runtime's (overhead: the same
    in every record of a spoke, they could not be told apart), its generation a term of its own.
    An SFT record keeps exactly the terms it always had."""
    terms = dict(MULTI_TERMS if "communication" in comps else TERMS)
    if "generation" in comps:
        terms["params"] = (*terms["params"], "reference_copy")
        terms["overhead"] = (*terms["overhead"], "oracle_procs")
        terms["generation"] = ("generation", "server")
        terms["logits"] = (*terms["logits"], "reference_logits")   # the head's, by phase
    return terms


def resolve(source: str) -> Path:
    """A path as given; `calibration/…` not found here is the shipped evidence (mens.evidence)."""
    p = Path(source)
    if p.is_absolute() or p.exists() or p.parts[:1] != ("calibration",):
        return p
    return EVIDENCE_DIR.joinpath(*p.parts[1:])


def collect(sources) -> tuple[list[dict], list[str]]:
    """Records from JSONL files, calibration.json files, run/sweep dirs (searched) and globs.
    Returns (records, problems): unreadable files and duplicate ids are problems, not silence."""
    records, problems, seen = [], [], set()
    for src in sources:
        paths = [Path(p) for p in sorted(glob.glob(str(resolve(src))))] or [resolve(src)]
        for path in paths:
            files = sorted(path.rglob(RunDir.CALIBRATION)) if path.is_dir() else [path]
            if path.is_dir() and not files:   # a folder of records files (calibration/external)
                files = sorted(path.glob("*.jsonl"))
            if not path.exists():
                problems.append(f"{src}: no such file or directory")
            for f in files:
                try:
                    rows = ([(n, json.loads(line)) for n, line in
                             enumerate(f.read_text().splitlines(), 1) if line.strip()]
                            if f.suffix == ".jsonl" else [(1, json.loads(f.read_text()))])
                except (OSError, ValueError) as e:
                    problems.append(f"{f}: unreadable ({e})")
                    continue
                for n, r in rows:
                    if is_external(r):   # a published measurement: its own kind of record
                        r = to_record(r, f"{f}:{n}")
                    if r["id"] in seen:
                        problems.append(f"{f}: duplicate record {r['id']} (kept the first)")
                        continue
                    seen.add(r["id"])
                    records.append(r)
    return records, problems


def record_components(r: dict, contract) -> dict[str, int]:
    """The analytic model's components for a record's shape, under the *current* model: one
    device's, of world_size under strategy (records before multi-device calibration: one)."""
    lane = dict(r["lane"])
    lane["lora_targets"] = tuple(lane["lora_targets"])
    shape = Shape(r["seq_len"], r["micro_batch"], r["checkpointing"], r["packing"])
    return components(Arch(**r["arch"]), LaneModel(**lane), shape, r["backend"], contract,
                      record_paths(r), world=world_size(r), strategy=r.get("strategy") or "single")


def world_size(r: dict) -> int:
    return int(r.get("world_size") or 1)


def one_device_key(cell: str) -> str:
    """cpu/full/ckpt/fp32/fsdp2 → cpu/full/ckpt/fp32 (a one-device key: itself)."""
    return "/".join(cell.split("/")[:4])


def record_paths(r: dict) -> dict:
    """The training paths a record was measured on (records before issue #13: the defaults)."""
    from mens.plan.memory import DEFAULT_PATHS
    return {**DEFAULT_PATHS, **(r.get("paths") or {})}


def term_columns(comps: dict[str, int]) -> dict[str, int]:
    """Components summed into the fit's terms; `communication` only where the components have
    it (several devices), so a one-device fit has exactly the terms it always had."""
    return {t: sum(comps.get(c, 0) for c in cs) for t, cs in terms_for(comps).items()}


def why_excluded(r: dict) -> str | None:
    if r.get("status") != "ok":
        reason = r.get("reason") or "no reason recorded"
        return {"lower_bound": f"lower bound only ({reason})", "skipped": f"not run ({reason})",
                }.get(r.get("status"), f"measurement {r.get('status')}: {reason}")
    if r.get("role") != "fit":
        return "held out: tests the fit, never enters it"
    return None


def other_paths(r: dict, contract) -> str | None:
    """Why a record cannot test or fit this contract's cells: measured on other training paths
    (train.attention / loss / heap) than the contract's `paths`; None when it can."""
    from mens.plan.memory import contract_paths

    mine, theirs = record_paths(r), contract_paths(contract)
    diff = [f"{k}={mine[k]}" for k in theirs if mine[k] != theirs[k]]
    return f"measured on other training paths ({', '.join(diff)})" if diff else None


def predicted_raw(r: dict, cell: dict | None, contract) -> int:
    """The fitted (or, without a cell, analytic) prediction for a record's shape, before any
    uncertainty: the planner's own arithmetic (mens.plan.memory.predict)."""
    return predict(record_components(r, contract), cell, 0.0)["raw_bytes"]


def merge_ranks(said: list[dict | None]) -> dict:
    """The ranks' readings as one device's: each step's peak the maximum over ranks, the window
    complete only when every rank's is, tokens/s summed. Per-rank readings are kept (`ranks`)."""
    got = [s for s in said if s]
    if not got:
        return {}
    first = said[0] or got[0]
    n = min(len(s.get("steps") or []) for s in got) if len(got) == len(said) else 0
    steps = [{**first["steps"][i], "peak_bytes": max(s["steps"][i]["peak_bytes"] for s in got)}
             for i in range(n)]

    def most(k):
        vals = [s.get(k) for s in got if s.get(k) is not None]
        return max(vals) if vals else None
    rates = [s.get("tokens_per_s") for s in got]
    errors = [f"rank {r}: {s['error']}" for r, s in enumerate(said) if s and s.get("error")]
    missing = [r for r, s in enumerate(said) if not s]
    return {**first, "steps": steps,
            "window_started": any(s.get("window_started") for s in got),
            "window_complete": not missing and all(s.get("window_complete") for s in got),
            "window_peak_bytes": max([most("window_peak_bytes") or 0] +
                                     [max((x["peak_bytes"] for x in s.get("steps") or []),
                                          default=0) for s in got]),
            "load_peak_bytes": most("load_peak_bytes"),
            "window_start_bytes": most("window_start_bytes"),
            "tokens_per_s": sum(rates) if None not in rates and len(got) == len(said) else None,
            "step_s": most("step_s"),
            "error": "; ".join(errors + [f"rank {r} wrote no reading" for r in missing]) or None,
            "ranks": [None if s is None else {
                "rank": r, "baseline_bytes": s.get("baseline_bytes"),
                "load_peak_bytes": s.get("load_peak_bytes"),
                "window_start_bytes": s.get("window_start_bytes"),
                "step_peaks_bytes": [x["peak_bytes"] for x in s.get("steps") or []],
                "window_complete": s.get("window_complete"), "error": s.get("error"),
                "tokens_per_s": s.get("tokens_per_s")} for r, s in enumerate(said)]}


def job_key(r: dict) -> str:
    """What makes two records measurements of the same sweep job (ids differ: host and date)."""
    keep = ("role", "cell", "arch", "lane", "seq_len", "micro_batch", "packing", "steps",
            "checkpointing", "precision", "backend")
    return json.dumps({**{k: r.get(k) for k in keep}, "rung": r["rung"]["name"],
                       "paths": record_paths(r), "world": world_size(r),
                       "strategy": r.get("strategy") or "single"}, sort_keys=True)


def recorded(sources, record: dict) -> tuple[dict, str] | None:
    """A finished record (ok / lower_bound) of `record`'s job in `sources`, and where."""
    if not sources:
        return None
    key = job_key(record)
    found, _ = collect(sources)
    for r in found:
        if r.get("status") in ("ok", "lower_bound") and job_key(r) == key:
            return r, str(r.get("run_dir") or r["id"])
    return None
