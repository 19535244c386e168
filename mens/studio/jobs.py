"""The Jobs panel's API: launch (after the planner agrees), list, control — checkpoint now
(SIGUSR1: last.ckpt at the next optimizer step, training goes on), checkpoint + pause (SIGINT),
abort (SIGTERM), resume, gate — and the live telemetry stream (server-sent events that follow
telemetry.jsonl from where they last read, never re-reading the whole file)."""
from __future__ import annotations

import asyncio
import json
import math
import signal
from pathlib import Path

from fastapi import Request
from fastapi.responses import StreamingResponse

from mens.run.rundir import RunDir
from mens.run.telemetry import TERMINAL, Event, Tail, last, vocabulary
from mens.studio.common import body, compose_plan
from mens.studio.procs import (LISTED, Refused, check_overrides, new_run_dir, rel, run_dir,
                               run_status, slim)

# action → (signal, what the trainer does with it); all go to the run's own child, by its pid
SIGNALS = {"checkpoint": signal.SIGUSR1,   # CheckpointNow: save last.ckpt, keep training
           "pause": signal.SIGINT,         # Interrupt: checkpoint, then exit 130
           "abort": signal.SIGTERM}        # stop now; the last periodic checkpoint stays


def epoch_segments(run: Path, total: int | None) -> list[dict]:
    """Each curriculum epoch's planned optimizer steps, from the CURRICULUM rows (`rows`: the
    epoch's packed rows, else `records`) over the spec's global batch — the datamodule's own
    arithmetic — cut at the planned total (train.max_steps may end a run inside an epoch)."""
    rd = RunDir(run)
    try:
        gb = int((rd.read_spec().get("train") or {}).get("global_batch") or 0)
    except Exception:   # a run dir still being written
        return []
    if gb <= 0:
        return []
    out, start = [], 0
    for r in rd.telemetry_rows(Event.CURRICULUM):
        n = r.get("rows") or r.get("records") or 0
        steps = math.ceil(n / gb)
        if total is not None:
            steps = max(0, min(steps, total - start))
        out.append({"epoch": r.get("epoch"), "start": start, "steps": steps, "cap": r.get("cap")})
        start += steps
    return out


def training(run: Path, child: dict | None) -> bool:
    """True once the child logged a TRAIN_STEP (the trainer's SIGUSR1 handler is installed at
    train start); rows from before this child (a resumed run) do not count."""
    return bool(child) and any(r.get("event") == Event.TRAIN_STEP
                               and r.get("time", 0) >= child["started"]
                               for r in last(RunDir(run).telemetry))


def add_jobs(app, root: Path, procs, gate_args: list[str] = ()) -> None:
    @app.post("/api/jobs")
    async def launch(request: Request):
        over = check_overrides((await body(request)).get("overrides", []))
        _, spec, p = await asyncio.to_thread(compose_plan, over)
        if not p.fits:
            raise Refused(409, f"the planner refuses this run on {spec.hw.name}: needs "
                               f"{p.peak_bytes / 2**30:.2f} GiB, budget "
                               f"{p.budget_bytes / 2**30:.2f} GiB; " + "; ".join(p.ways_out))
        out = new_run_dir(root, "train")
        procs.spawn("train", ["-m", "mens", *over, f"hydra.run.dir={out}"], out)
        return {"id": rel(root, out), "argv": ["python", "-m", "mens", *over]}

    @app.get("/api/jobs")
    def jobs():
        out = []
        for r in RunDir.find(root, **LISTED):
            s = run_status(root, r, procs.alive(str(r)))
            s["epochs"] = epoch_segments(r, s["total"])
            out.append(s)
        return {"runs": out}

    @app.post("/api/jobs/control")
    async def control(request: Request):
        data = await body(request)
        run = run_dir(root, data.get("id"))
        action = data.get("action")
        if action == "checkpoint" and not training(run, procs.children.get(str(run))):
            # SIGUSR1 before the trainer's handler is installed would end the process
            raise Refused(409, "not training yet: `checkpoint now` works once this run has "
                               "logged its first optimizer step")
        if action in SIGNALS:
            pid = procs.signal(str(run), SIGNALS[action])
            return {"id": rel(root, run), "action": action, "pid": pid}
        if action == "resume":
            if procs.alive(str(run)):
                raise Refused(409, "it is running")
            procs.spawn("train", ["-m", "mens", f"resume={run}"], run)
        elif action == "gate":
            if procs.alive(f"gate:{run}"):
                raise Refused(409, "its gate is running")
            procs.spawn("gate", ["-m", "mens.gate", f"run={run}", *gate_args], run,
                        key=f"gate:{run}")
        else:
            raise Refused(400, "action: checkpoint | pause | abort | resume | gate")
        return {"id": rel(root, run), "action": action}

    @app.get("/api/telemetry")
    def telemetry_vocabulary():
        """The event names (mens.run.telemetry): the page reads the stream by these."""
        return vocabulary()

    @app.get("/api/jobs/events")
    async def events(id: str, request: Request):
        run = run_dir(root, id)
        tail = Tail(RunDir(run).telemetry)

        async def stream():
            idle = 0
            while not await request.is_disconnected():
                rows = [s for s in map(slim, tail.read()) if s]
                for r in rows:
                    yield f"data: {json.dumps(r)}\n\n"
                if any(r["event"] in TERMINAL for r in rows) or (
                        not procs.alive(str(run)) and not rows and idle > 4):
                    yield "event: end\ndata: {}\n\n"
                    return
                idle = 0 if rows else idle + 1
                await asyncio.sleep(0.4)
        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"cache-control": "no-store"})
