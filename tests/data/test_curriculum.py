"""Curriculum admission by difficulty cap, phase order, seeded shuffles, telemetry counts."""
from __future__ import annotations

import random

import pytest

from mens.data.curriculum import epoch_counts, epoch_records, shuffle_within_phase
from mens.data.pack import Example, pack

PHASES = ["warmup", "syntax", "reasoning", "tool_call", "multi_turn", "orchestration", "agentic"]
CAPS = [4, 7, 10]


@pytest.fixture
def records():
    rng = random.Random(0)
    return [{"id": i, "difficulty": rng.randint(1, 10), "phase": rng.choice(PHASES)}
            for i in range(300)]


def ranks(recs):
    return [PHASES.index(r["phase"]) for r in recs]


@pytest.mark.parametrize("epoch", [0, 1, 2, 3, 7])
def test_each_epoch_admits_exactly_the_records_at_or_below_its_cap(records, epoch):
    cap = CAPS[min(epoch, len(CAPS) - 1)]
    got = epoch_records(records, CAPS, PHASES, epoch)
    assert sorted(r["id"] for r in got) == sorted(r["id"] for r in records if r["difficulty"] <= cap)
    assert all(r["difficulty"] <= cap for r in got)


def test_caps_rise_so_admission_grows(records):
    sizes = [len(epoch_records(records, CAPS, PHASES, e)) for e in range(3)]
    assert sizes[0] < sizes[1] < sizes[2] == len(records)


def test_phase_order_and_stability_within_phase(records):
    got = epoch_records(records, CAPS, PHASES, 1)
    assert ranks(got) == sorted(ranks(got))
    for p in PHASES:
        ids = [r["id"] for r in got if r["phase"] == p]
        assert ids == sorted(ids)  # input order kept inside a phase


def test_unknown_phase_is_named(records):
    bad = records + [{"id": "x9", "difficulty": 10, "phase": "toolcall"}]
    for fn in (lambda: epoch_records(bad, CAPS, PHASES, 0), lambda: epoch_counts(bad, CAPS, PHASES)):
        with pytest.raises(ValueError, match="toolcall") as e:
            fn()
        assert "x9" in str(e.value)  # raised on epoch 0 even though cap 4 would not admit it


def test_bad_caps_and_epoch():
    with pytest.raises(ValueError, match="caps"):
        epoch_records([], [], PHASES, 0)
    with pytest.raises(ValueError, match="epoch"):
        epoch_records([], CAPS, PHASES, -1)


def test_counts(records):
    counts = epoch_counts(records, CAPS, PHASES)
    assert len(counts) == len(CAPS) and all(set(c) == {"total", "per_phase"} for c in counts)
    for e, c in enumerate(counts):
        got = epoch_records(records, CAPS, PHASES, e)
        assert c["total"] == len(got) == sum(c["per_phase"].values())
        assert list(c["per_phase"]) == PHASES
        assert c["per_phase"] == {p: sum(r["phase"] == p for r in got) for p in PHASES}
    assert counts[-1]["total"] == len(records)
    five = epoch_counts(records, CAPS, PHASES, epochs=5)
    assert five[:3] == counts and five[3] == five[4] == counts[2]  # past the last cap: keep it
    tiny = [{"difficulty": 2, "phase": "syntax"}, {"difficulty": 9, "phase": "syntax"}]
    assert epoch_counts(tiny, [5, 9], ["warmup", "syntax"]) == [
        {"total": 1, "per_phase": {"warmup": 0, "syntax": 1}},
        {"total": 2, "per_phase": {"warmup": 0, "syntax": 2}}]


def test_shuffle_within_phase_deterministic_varies_by_epoch_and_keeps_phases(records):
    base = epoch_records(records, CAPS, PHASES, 2)
    a = shuffle_within_phase(base, seed=7, epoch=0)
    assert a == shuffle_within_phase(base, seed=7, epoch=0)
    assert a != shuffle_within_phase(base, seed=7, epoch=1)
    assert a != shuffle_within_phase(base, seed=8, epoch=0)
    assert a != base
    assert ranks(a) == ranks(base)  # each position keeps its phase: phase order survives
    assert sorted(r["id"] for r in a) == sorted(r["id"] for r in base)
    assert base == epoch_records(records, CAPS, PHASES, 2)  # input untouched


def test_shuffle_rows_after_packing_keeps_phase_order(records):
    recs = shuffle_within_phase(epoch_records(records, CAPS, PHASES, 0), seed=1, epoch=0)
    exs = [Example([1] * (r["difficulty"] + 2), [1] * (r["difficulty"] + 2),
                   PHASES.index(r["phase"]), r["id"]) for r in recs]
    rows = pack(exs, seq_len=16)
    shuffled = shuffle_within_phase(rows, seed=1, epoch=0, key=lambda row: row.phase)
    assert [r.phase for r in shuffled] == [r.phase for r in rows] == sorted(r.phase for r in rows)
    assert [r.record_ids for r in shuffled] != [r.record_ids for r in rows]
