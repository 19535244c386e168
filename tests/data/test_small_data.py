"""Small data (issue #25): a dataset of a few records — a fresh `mens data synth` output — trains
with the defaults. With two or more records the held-out split takes at least one (the record
whose id hashes lowest, the one the fraction would take first as the data grows), said in the
plan's notes and the DATA row; data errors say what was removed in words, not a Python dict."""
from __future__ import annotations

import json

import pytest
from userdata import chat_records, write_jsonl

from mens.data.clean import hash_fraction, hold_out, record_id
from mens.data.sources import load_data
from mens.run.telemetry import read

BASE = {"source": "file", "eval_fraction": 0.05, "decontam_n": 13, "decontam_threshold": 0.5}


def nine_none_held() -> list[dict]:
    """Nine chat records none of whose ids hashes below 5 % (so the minimum is what holds one)."""
    for seed in range(100):
        recs = chat_records(9, seed=seed, multi_turn=False)
        ids = [record_id({"messages": r["messages"]}) for r in recs]
        if all(hash_fraction(i) >= 0.05 for i in ids):
            return recs
    raise AssertionError("no seed gave nine records outside the 5 % hash split")


def test_hold_out_takes_the_lowest_hash_only_when_the_fraction_takes_none():
    recs = [{"id": f"r{i}"} for i in range(9)]
    train, held, raised = hold_out(recs, 0.0)
    assert raised and len(held) == 1 and len(train) == 8
    assert held[0]["id"] == min((r["id"] for r in recs), key=hash_fraction)
    assert hold_out(recs[:1], 0.0) == (recs[:1], [], False)      # one record: nothing to hold
    train, held, raised = hold_out(recs, 1.0)                     # the fraction holds all
    assert not raised and len(held) == 9


def test_nine_records_hold_one_out_and_say_so(tmp_path):
    path = write_jsonl(tmp_path / "nine.jsonl", nine_none_held())
    ds = load_data({**BASE, "path": str(path)}, "sft")
    assert (len(ds.train), len(ds.eval)) == (8, 1)
    assert ds.stats["eval_minimum_applied"] is True
    assert "held out none of 9 records" in ds.stats["eval_from"]


@pytest.mark.slow   # in `make test-slow` (CI runs it): keeps `make test` near 20 min
def test_nine_records_train_with_the_defaults(tmp_path, mens_cli):
    path = write_jsonl(tmp_path / "nine.jsonl", nine_none_held())
    run = tmp_path / "run"
    res = mens_cli("mens", "+hw=cpu", "data=file", f"data.path={path}", "train.max_steps=2",
                   "logger=csv", f"hydra.run.dir={run}")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "held out none of 9 records" in res.stdout
    data = [r for r in read(run / "telemetry.jsonl") if r["event"] == "DATA"][0]
    assert data["eval_minimum_applied"] is True and data["eval_records"] == 1
    assert json.loads((run / "summary.json").read_text())["steps"] == 2


def test_an_emptied_dataset_is_described_in_words(tmp_path, mens_cli):
    recs = [{**r, "rating": 1} for r in chat_records(5)]
    path = write_jsonl(tmp_path / "low.jsonl", recs)
    res = mens_cli("mens.plan", "+hw=cpu", "data=file", f"data.path={path}",
                   "data.min_rating=4")
    assert res.returncode == 2, res.stderr[-2000:]
    err = res.stderr
    assert "5 records read, 5 below data.min_rating" in err, err
    assert "{" not in err and "Traceback" not in err
