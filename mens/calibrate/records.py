"""Calibration records (what `mens.calibrate` writes) as `mens.fit` and its report read them:
collecting them from files, dirs and globs, the analytic model's components for a record's
shape under the current contract, the terms a fit tells apart, and why a record is left out.
"""
from __future__ import annotations

import glob
import json
from pathlib import Path

from mens.plan.memory import Arch, LaneModel, Shape, components, predict
from mens.resources import EVIDENCE_DIR

MiB = 2**20
BIG = 512 * MiB         # relative errors count from here; below, errors are absolute
TERMS = {"params": ("weights", "trainable", "gradients", "optimizer"),
         "activations": ("activations",), "large_activations": ("large_activations",),
         "logits": ("logits",),
         "packing_mask": ("packing_mask",), "retention": ("retention",),
         "overhead": ("overhead",)}


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
            files = sorted(path.rglob("calibration.json")) if path.is_dir() else [path]
            if not path.exists():
                problems.append(f"{src}: no such file or directory")
            for f in files:
                try:
                    rows = ([json.loads(line) for line in f.read_text().splitlines() if line.strip()]
                            if f.suffix == ".jsonl" else [json.loads(f.read_text())])
                except (OSError, ValueError) as e:
                    problems.append(f"{f}: unreadable ({e})")
                    continue
                for r in rows:
                    if r["id"] in seen:
                        problems.append(f"{f}: duplicate record {r['id']} (kept the first)")
                        continue
                    seen.add(r["id"])
                    records.append(r)
    return records, problems


def record_components(r: dict, contract) -> dict[str, int]:
    """The analytic model's components for a record's shape, under the *current* model."""
    lane = dict(r["lane"])
    lane["lora_targets"] = tuple(lane["lora_targets"])
    shape = Shape(r["seq_len"], r["micro_batch"], r["checkpointing"], r["packing"])
    return components(Arch(**r["arch"]), LaneModel(**lane), shape, r["backend"], contract)


def term_columns(comps: dict[str, int]) -> dict[str, int]:
    return {t: sum(comps[c] for c in cs) for t, cs in TERMS.items()}


def why_excluded(r: dict) -> str | None:
    if r.get("status") != "ok":
        reason = r.get("reason") or "no reason recorded"
        return {"lower_bound": f"lower bound only ({reason})", "skipped": f"not run ({reason})",
                }.get(r.get("status"), f"measurement {r.get('status')}: {reason}")
    if r.get("role") != "fit":
        return "held out: tests the fit, never enters it"
    return None


def predicted_raw(r: dict, cell: dict | None, contract) -> int:
    """The fitted (or, without a cell, analytic) prediction for a record's shape, before any
    uncertainty: the planner's own arithmetic (mens.plan.memory.predict)."""
    return predict(record_components(r, contract), cell, 0.0)["raw_bytes"]
