"""The gate receipt (`<run dir>/gate.json`) and what may be promoted — torch-free.

A receipt names the bytes it judged: `artifact_sha256` is a digest over every file of the run's
adapter/ (full lane: model/), so a retrain into the same dir, or an edited adapter, voids it.
It also records the spoke corpora it measured on (`corpus_lock`), which the ladder compares
with the corpora now (mens.ladder.state: a changed corpus makes the cell STALE).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from mens.run.hashing import sha256
from mens.run.rundir import RunDir

RECEIPT = "gate.json"


def artifact_dir(run: Path | str) -> Path | None:
    """The trained artifact of a run: adapter/ (adapter lanes) or model/ (full lane)."""
    return RunDir(run).artifact


def artifact_sha256(run: Path | str) -> str | None:
    """sha256 over (relative name, sha256) of every file of the artifact, sorted; None: none."""
    d = artifact_dir(run)
    if d is None:
        return None
    h = hashlib.sha256()
    for p in sorted(q for q in d.rglob("*") if q.is_file()):
        h.update(f"{p.relative_to(d).as_posix()}\0{sha256(p)}\n".encode())
    return h.hexdigest()


def write_receipt(run: Path | str, receipt: dict) -> Path:
    """<run>/gate.json (atomic, rank 0): the one writer of a receipt (mens.gate.run measures)."""
    return RunDir(run).write_json(RECEIPT, receipt)


def read_receipt(run: Path | str) -> dict | None:
    """gate.json as written by mens.gate (None: the run was never gated)."""
    rd = RunDir(run)
    return rd.read_json(RECEIPT) if (rd / RECEIPT).is_file() else None


def receipt_status(run: Path | str, receipt: dict | None = None) -> tuple[str, str]:
    """('pass' | 'fail' | 'void' | 'none', why): 'void' when the artifact changed since."""
    receipt = read_receipt(run) if receipt is None else receipt
    if not receipt:
        return "none", f"{run} has no {RECEIPT}: gate it first with `mens gate run={run}`"
    now = artifact_sha256(run)
    if receipt.get("artifact_sha256") != now:
        return "void", (f"{run}/{RECEIPT} judged other weights (sha256 "
                        f"{str(receipt.get('artifact_sha256'))[:12]}…, the adapter now "
                        f"{str(now)[:12]}…): the run was retrained or edited; gate it again "
                        f"with `mens gate run={run}`")
    if receipt.get("verdict") != "pass":
        reasons = "; ".join(receipt.get("reasons") or []) or "no reason recorded"
        return "fail", f"{run} failed its gate: {reasons}"
    return "pass", f"{run} passed its gate ({RECEIPT})"


def promotable(run: Path | str | None) -> tuple[bool, str]:
    """May this run's adapter become champion? Only with a passing receipt that still matches."""
    if run is None:
        return False, ("the slot has no run dir (a bare adapter dir): only a gated run may be "
                       "promoted; serve the run dir that holds adapter/ and gate.json")
    status, why = receipt_status(run)
    return status == "pass", why
