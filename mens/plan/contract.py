"""The memory contract (calibration/contract.yaml): the analytic model's constants, the fitted
cells that correct it, and how a prediction takes a cell's correction and its uncertainty.

mens.plan.memory computes a step's components from architecture numbers; this module says
which fit applies to them (or why none does) and what peak the planner then predicts.
"""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Mapping

import yaml

from mens.resources import CONTRACT as CONTRACT_PATH

# The version of mens.plan.memory's formulas. The contract names the version it was fitted
# under (`version:`) and every cell's digest covers it: a change of what a formula computes
# bumps it, and every fit made under the old formulas is then stale (ignored, said) until
# `make fit`.
FORMULA_VERSION = 4
# The default training paths when a contract names none (what the cells were fitted on).
DEFAULT_PATHS = {"attention": "block_mask", "loss": "full_logits", "heap": "default"}


@lru_cache(maxsize=8)
def load_contract(path: str | None = None) -> Mapping:
    with open(path or CONTRACT_PATH) as f:
        data = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    data.setdefault("cells", {})
    return data


def shipped_constant(key: str) -> float:
    """A number of the shipped contract's `model` (for the training code, which reads what the
    planner models: one owner, the contract)."""
    return load_contract()["model"][key]


def min_margin(contract: Mapping | None = None) -> float:
    """The least margin an uncalibrated cell gets (the contract's `margins`)."""
    return float((contract or load_contract())["margins"]["uncalibrated_min"])


def model_digest(model: Mapping) -> str:
    """Fingerprint of the analytic model: its constants and the version of its formulas. A cell
    fitted under other constants or formulas is stale (its coefficients corrected different
    arithmetic), so the planner ignores it."""
    text = json.dumps({"formulas": FORMULA_VERSION, "model": model}, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def stale_note(contract: Mapping, key: str) -> str | None:
    """What to say when a cell has a fit made under other model constants or formulas."""
    cell = (contract.get("cells") or {}).get(key)
    if cell and "coefficients" in cell and cell.get("model_digest") != model_digest(contract["model"]):
        why = (f"the contract names formula version {contract.get('version')} and this mens "
               f"computes version {FORMULA_VERSION}" if contract.get("version") != FORMULA_VERSION
               else "another version of the contract's model constants")
        return (f"memory cell {key} was fitted under {why} (digest "
                f"{cell.get('model_digest')}): its fit is ignored and the cell is "
                f"uncalibrated; refit with `make fit`")
    return None


def usable_cell(contract: Mapping, key: str) -> Mapping | None:
    """The cell's fit, if it was fitted under this model (else stale: None, see stale_note).
    Whether it counts as *calibrated* (uncertainty ≤ 10 %, held-out records inside it) is the
    cell's own flag: an uncalibrated fit still gives the best coefficients, under the larger
    margin."""
    cell = (contract.get("cells") or {}).get(key)
    if not cell or "coefficients" not in cell or stale_note(contract, key):
        return None
    return cell


def cell_key(backend: str, lane, checkpointing: bool) -> str:
    """A cell's name; lane: a mens.plan.memory.LaneModel (its label and precision; not imported
    here: memory imports the contract)."""
    return f"{backend}/{lane.label}/{'ckpt' if checkpointing else 'nockpt'}/{lane.precision}"


def contract_paths(contract: Mapping) -> dict:
    return {**DEFAULT_PATHS, **(contract.get("paths") or {})}


def with_uncertainty(raw: int, uncertainty: float, floor: int = 0) -> int:
    """A prediction's peak: raw plus its uncertainty, relative with an absolute floor (small
    peaks are dominated by allocator granularity)."""
    return raw + max(int(raw * uncertainty), floor)


def predict(comps: Mapping[str, int], cell: Mapping | None, margin: float) -> dict:
    """Apply a fitted cell's coefficients (or none: all 1). A calibrated cell's own uncertainty
    replaces the uncalibrated margin, and so does an `external` one's (the held-out error it
    earned on published measurements, leave-one-source-out); a fitted but uncalibrated one gets
    the larger of the two. `cell` is what `usable_cell` returns."""
    coef = (cell or {}).get("coefficients", {})
    corrected = {k: int(v * coef.get(k, 1.0)) for k, v in comps.items()}
    raw = sum(corrected.values())
    calibrated = bool(cell and cell.get("calibrated"))
    external = bool(cell and not calibrated and cell.get("external"))
    uncertainty = float(cell["uncertainty"]) if cell else margin
    if not (calibrated or external):
        uncertainty = max(uncertainty, margin)
    floor = int(cell.get("uncertainty_floor_bytes", 0)) if cell else 0
    return {"components": corrected, "raw_bytes": raw, "uncertainty": uncertainty,
            "peak_bytes": with_uncertainty(raw, uncertainty, floor), "calibrated": calibrated,
            "external": external, "sources": list((cell or {}).get("sources") or []) if external
            else [], "fitted": bool(cell)}
