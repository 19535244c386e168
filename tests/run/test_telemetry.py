"""mens.run.telemetry's one reader (whole file, one event, the first row, the last bytes, a tail
from an offset) against files the real writer (mens.train.telemetry.Telemetry) appends to while
they are read, and the rows' fields."""
from __future__ import annotations

import json

import pytest

from mens.run.rundir import RunDir
from mens.run.telemetry import (ROWS, TERMINAL, Event, Tail, first, last, problems, read,
                                required, vocabulary)
from mens.train.telemetry import Telemetry


def test_the_writer_speaks_the_vocabulary_and_the_reader_reads_it_back(tmp_path):
    run = RunDir(tmp_path)
    tel = Telemetry(run.telemetry)
    tel.emit(Event.TRAIN_START, spec={"rung": {"name": "tiny"}})
    for s in (1, 2):
        tel.emit(Event.TRAIN_STEP, step=s, loss=1.0 / s)
    tel.emit(Event.CHECKPOINT, step=2)
    with pytest.raises(ValueError):
        tel.emit("TRAIN_STPE", step=3)           # a misspelt event is refused, not written
    tel.close()
    text = run.telemetry.read_text()
    assert '"event": "TRAIN_STEP"' in text and "STPE" not in text   # bare names in the file
    assert [r["event"] for r in read(run.telemetry)] == [
        "TRAIN_START", "TRAIN_STEP", "TRAIN_STEP", "CHECKPOINT"]
    assert [r["step"] for r in read(run.telemetry, Event.TRAIN_STEP)] == [1, 2]
    assert run.telemetry_rows(Event.TRAIN_STEP) == read(run.telemetry, "TRAIN_STEP")
    assert first(run.telemetry)["spec"] == {"rung": {"name": "tiny"}}
    assert read(tmp_path / "none.jsonl") == [] and first(tmp_path / "none.jsonl") is None


def test_a_row_being_written_is_not_read_and_a_corrupt_one_is_said(tmp_path):
    p = tmp_path / "telemetry.jsonl"
    p.write_text('{"event": "TRAIN_STEP", "step": 1}\n{"event": "TRAIN_ST')   # mid-write
    assert [r["step"] for r in read(p)] == [1]
    p.write_text('{"event": "DATA"}\n{"event": "TRAIN_ST{"event": "EVAL"}\n{"event": "NOTE"}\n')
    with pytest.raises(ValueError, match="not JSON"):
        read(p)                                   # a killed writer's half row, then more rows
    assert [r["event"] for r in read(p, strict=False)] == ["DATA", "NOTE"]
    p.write_text('{"event": "TRAIN_START"')       # the first row not yet complete
    assert first(p) is None


def test_last_reads_only_the_end_of_a_long_file(tmp_path):
    p = tmp_path / "telemetry.jsonl"
    with open(p, "w") as f:
        for s in range(2000):
            f.write(json.dumps({"event": "TRAIN_STEP", "step": s}) + "\n")
    rows = last(p, nbytes=4096)
    assert rows[-1]["step"] == 1999 and 0 < len(rows) < 200
    assert [r["step"] for r in rows] == list(range(rows[0]["step"], 2000))   # no cut row
    assert last(tmp_path / "absent") == []


def test_tail_returns_new_rows_since_its_offset(tmp_path):
    p = tmp_path / "telemetry.jsonl"
    tail = Tail(p)
    assert tail.read() == [] and tail.offset == 0   # no file yet
    tel = Telemetry(p)
    tel.emit(Event.TRAIN_START)
    tel.emit(Event.TRAIN_STEP, step=1)
    assert [r["event"] for r in tail.read()] == ["TRAIN_START", "TRAIN_STEP"]
    assert tail.read() == []                        # nothing new
    with open(p, "a") as f:                         # half a row: held back until complete
        f.write('{"event": "TRAIN_STEP", "st')
        f.flush()
        assert tail.read() == []
        f.write('ep": 2}\n')
    assert [r["step"] for r in tail.read()] == [2]
    tel.emit(Event.TRAIN_COMPLETE, steps=2)
    tel.close()
    again = Tail(p, offset=tail.offset)              # a view that reconnects where it was
    assert [r["event"] for r in again.read()] == [Event.TRAIN_COMPLETE]
    assert again.offset == p.stat().st_size
    assert [r["event"] for r in Tail(p).read()] == [r["event"] for r in read(p)]


def test_every_event_has_a_row_and_the_rows_say_what_is_missing():
    assert set(ROWS) == set(Event) and set(TERMINAL) <= set(Event)
    assert {"event", "time"} <= required(Event.NOTE) and "detail" in required("NOTE")
    assert problems({"event": "NOTE", "time": 1.0, "detail": "x"}) == []
    assert problems({"event": "CHECKPOINT", "time": 1.0, "step": 2}) == [
        "CHECKPOINT row without `epoch`", "CHECKPOINT row without `path`",
        "CHECKPOINT row without `world_size`"]
    assert problems({"event": "STEP"}) == ["unknown event 'STEP'"]
    v = vocabulary()
    assert v["events"]["TRAIN_STEP"] == "TRAIN_STEP" and len(v["events"]) == len(Event)
    assert json.loads(json.dumps(v)) == v and v["terminal"] == [
        "TRAIN_COMPLETE", "TRAIN_FAILED", "TRAIN_INTERRUPTED"]
