"""The Jobs API against the real app and real training children: `checkpoint now` (SIGUSR1 to
the run's own trainer) is refused until the trainer's handler is installed, then saves
last.ckpt with a CHECKPOINT row of reason "requested" while the run goes on; progress is
segmented by curriculum epoch."""
from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

from mens.config.compose import compose
from mens.studio.app import build_app

FAST = ["+hw=cpu", "logger=csv", "train.seq_len=256", "train.global_batch=4",
        "train.micro_batch=4", "curriculum=flat", "train.eval_max_records=6"]


@pytest.fixture()
def client(tmp_path):
    cfg = compose(["+hw=cpu", f"studio.runs={tmp_path / 'runs'}"])
    with TestClient(build_app(cfg, "127.0.0.1", 8090), base_url="http://127.0.0.1:8090") as c:
        yield c, tmp_path / "runs"


def rows(run, event):
    p = run / "telemetry.jsonl"
    lines = p.read_text().splitlines() if p.is_file() else []
    return [r for r in map(json.loads, filter(None, lines)) if r["event"] == event]


def wait(cond, timeout, what):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = cond()
        if v:
            return v
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_the_page_reads_the_stream_by_the_servers_event_names(client):
    """/api/telemetry is mens.run.telemetry's vocabulary; /api/jobs/events tails a run's rows
    (slimmed for the chart) and ends at a terminal row."""
    from mens.run.telemetry import vocabulary
    c, runs = client
    v = c.get("/api/telemetry").json()
    assert v == vocabulary() and v["events"]["CHECKPOINT"] == "CHECKPOINT"
    run = runs / "old"
    run.mkdir(parents=True)
    (run / "telemetry.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"event": "TRAIN_START", "time": 1.0, "plan": {"peak_bytes": 5}, "spec": {"big": 1}},
        {"event": "DATA", "time": 1.5},
        {"event": "TRAIN_STEP", "time": 2.0, "step": 1, "loss": 2.5, "argv": ["x"]},
        {"event": "CHECKPOINT", "time": 3.0, "step": 1, "path": "p"},
        {"event": "TRAIN_COMPLETE", "time": 4.0, "steps": 1}]))
    body = c.get("/api/jobs/events", params={"id": "old"}).text
    got = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {\"")]
    assert [r["event"] for r in got] == ["TRAIN_START", "TRAIN_STEP", "CHECKPOINT",
                                         "TRAIN_COMPLETE"]
    assert got[0] == {"event": "TRAIN_START", "time": 1.0, "planned_peak_bytes": 5}
    assert "argv" not in got[1] and body.rstrip().endswith("data: {}")
    (status,) = c.get("/api/jobs").json()["runs"]
    assert status["state"] == "stopped" and status["step"] == 1 and status["loss"] == 2.5


def test_checkpoint_now_waits_for_the_trainer_and_abort_signals_the_child(client):
    c, runs = client
    rid = c.post("/api/jobs", json={"overrides": [*FAST, "train.max_steps=50"]}).json()["id"]
    child = c.app.app.state.procs.children[str((runs / rid).resolve())]["proc"]
    r = c.post("/api/jobs/control", json={"id": rid, "action": "checkpoint"})
    assert r.status_code == 409 and "first optimizer step" in r.json()["error"]
    assert child.poll() is None          # refused, not sent: SIGUSR1 would have ended it
    r = c.post("/api/jobs/control", json={"id": rid, "action": "abort"})
    assert r.status_code == 200 and r.json()["pid"] == child.pid
    assert child.wait(timeout=30) != 0   # SIGTERM reached that very process
    r = c.post("/api/jobs/control", json={"id": rid, "action": "checkpoint"})
    assert r.status_code == 409          # nothing running under this studio any more


@pytest.mark.slow
def test_checkpoint_now_saves_and_training_goes_on(client):
    c, runs = client
    rid = c.post("/api/jobs", json={"overrides": [*FAST, "train.max_steps=14"]}).json()["id"]
    run = (runs / rid).resolve()
    child = c.app.app.state.procs.children[str(run)]["proc"]
    wait(lambda: rows(run, "TRAIN_STEP"), 180, "the first TRAIN_STEP")
    r = c.post("/api/jobs/control", json={"id": rid, "action": "checkpoint"})
    assert r.status_code == 200 and r.json()["pid"] == child.pid
    ck = wait(lambda: [x for x in rows(run, "CHECKPOINT") if x.get("reason") == "requested"],
              120, "a requested CHECKPOINT row")[0]
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert child.wait(timeout=300) == 0                       # it kept training to the end
    steps = [x["step"] for x in rows(run, "TRAIN_STEP")]
    assert max(steps) == 14 and ck["step"] < 14
    assert rows(run, "TRAIN_COMPLETE")
    job = next(j for j in c.get("/api/jobs").json()["runs"] if j["id"] == rid)
    assert job["state"] == "finished" and job["total"] == 14
    segs = job["epochs"]                 # curriculum epochs: planned steps, cut at max_steps
    assert segs and segs[0]["start"] == 0 and sum(s["steps"] for s in segs) == 14
