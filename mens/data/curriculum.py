"""Which records an epoch sees, and in what order.

Epoch e admits the records with difficulty <= caps[min(e, len(caps) - 1)] (epochs past the last
cap keep it) and orders them by phase, as listed in the curriculum's `phases` (warmup first).
The order is the list itself: `mens.data.pack.pack` gives each packed row the phase of its
longest record and emits rows in phase order, so no sampler is needed (a shorter record may fill
a row of a nearby phase: `curriculum.pack_window`). `shuffle_within_phase` varies the order
inside each phase by seed and epoch.
Records are dicts with at least `difficulty` (int 1-10) and `phase` (str).
"""
from __future__ import annotations

import random
from itertools import groupby
from typing import Callable, Sequence


def _cap(caps: Sequence[int], epoch: int) -> int:
    if not caps:
        raise ValueError("curriculum caps is empty: give one max difficulty per epoch")
    if epoch < 0:
        raise ValueError(f"epoch must be >= 0, got {epoch}")
    return caps[min(epoch, len(caps) - 1)]


def phase_index(records: Sequence[dict], phases: Sequence[str]) -> list[int]:
    """Each record's phase position; an unknown phase is an error naming it (a typo in the data
    would otherwise silently drop or misorder records)."""
    where = {p: i for i, p in enumerate(phases)}
    out = []
    for n, r in enumerate(records):
        p = r.get("phase")
        if p not in where:
            rid = r.get("id", n)
            raise ValueError(f"record {rid!r} has unknown phase {p!r}; known phases: {list(phases)}")
        out.append(where[p])
    return out


def epoch_records(records: Sequence[dict], caps: Sequence[int], phases: Sequence[str],
                  epoch: int) -> list[dict]:
    """Records admitted in `epoch` (0-based), ordered by phase, stable within a phase.

    Every record's phase is checked, admitted or not, so a bad phase fails on epoch 0, not later.
    """
    cap = _cap(caps, epoch)
    idx = phase_index(records, phases)
    keep = [(i, r) for i, r in zip(idx, records) if r["difficulty"] <= cap]
    return [r for _, r in sorted(keep, key=lambda ir: ir[0])]  # sorted() is stable


def epoch_counts(records: Sequence[dict], caps: Sequence[int], phases: Sequence[str],
                 epochs: int | None = None) -> list[dict]:
    """Per-epoch telemetry, list index = epoch: [{total, per_phase: {phase: n}}], every phase
    listed (0s kept). No epoch/cap keys, so callers can splat it next to their own.

    `epochs` defaults to len(caps); later epochs repeat the last cap.
    """
    idx = phase_index(records, phases)
    out = []
    for e in range(len(caps) if epochs is None else epochs):
        cap = _cap(caps, e)
        per = dict.fromkeys(phases, 0)
        for i, r in zip(idx, records):
            if r["difficulty"] <= cap:
                per[phases[i]] += 1
        out.append({"total": sum(per.values()), "per_phase": per})
    return out


def shuffle_within_phase(items: Sequence, seed: int, epoch: int,
                         key: Callable = lambda r: r["phase"]) -> list:
    """Shuffle inside each run of equal `key`, keeping the runs in place; deterministic in
    (seed, epoch), different across epochs.

    Feed it `epoch_records(...)` (runs = phases). `key=lambda row: row.phase` shuffles packed
    rows instead: FFD emits a phase's rows longest-first, so shuffling records before packing
    only breaks length ties — shuffle the rows to vary the order training sees.
    """
    # A str seed is hashed with SHA-512 by random.seed: stable across processes and Python
    # versions, unlike hash() of a tuple.
    rng = random.Random(f"mens-curriculum/{seed}/{epoch}")
    out: list = []
    for _, run in groupby(items, key=key):
        run = list(run)
        rng.shuffle(run)
        out += run
    return out
