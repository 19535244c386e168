"""The processes the studio starts — each a real mens command (`python -m mens …`,
`python -m mens.gate …`, `python -m mens.serve …`, `python -m mens.afk …`) — and the run dirs
it reads. Nothing here trains, gates or serves itself: the studio is a surface over the commands.

A run is named by its path relative to studio.runs (`studio-jobs/20261201-101500_train`);
`run_dir` refuses anything that leaves that root (`..`, absolute paths, symlinks out).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from mens.config.objectives import lane_fields
from mens.run.receipt import RECEIPT
from mens.run.rundir import RunDir
from mens.run.telemetry import TERMINAL, Event, last

# overrides the page may pass to a training or planning command: the run's axes and knobs,
# never hydra.* (run dirs, launchers, callbacks), rerun/resume or another command's section
OVERRIDE = re.compile(r"^\+?(hw|rung|spoke|data|lane|curriculum|logger|recipe|train|plan)"
                      r"(\.[A-Za-z0-9_]+)*=[^\n\r\x00]{0,200}$")


class Refused(Exception):
    """A request the studio answers with a 4xx (status, message); nothing was changed."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def check_overrides(overrides) -> list[str]:
    if not isinstance(overrides, list) or len(overrides) > 40:
        raise Refused(400, "overrides: a list of at most 40 `key=value` strings")
    for o in overrides:
        if not isinstance(o, str) or not OVERRIDE.match(o):
            raise Refused(400, f"override `{str(o)[:80]}` is not allowed here: the studio "
                               f"passes only hw, rung, spoke, data, lane, curriculum, logger, "
                               f"recipe, train.* and plan.* overrides")
    return list(overrides)


def run_dir(root: Path, rid: str | None) -> Path:
    """The run dir `rid` names under root, or Refused (400 outside the root, 404 absent)."""
    if not rid or not isinstance(rid, str) or len(rid) > 300 or "\x00" in rid or "\\" in rid:
        raise Refused(400, "run: a run dir's path relative to studio.runs")
    p = Path(rid)
    if p.is_absolute() or ".." in p.parts:
        raise Refused(400, f"run `{rid}` leaves studio.runs: name a run inside it")
    full = (root / p).resolve()
    if full != root and root not in full.parents:
        raise Refused(400, f"run `{rid}` leaves studio.runs (a link out of it)")
    # a job this studio just launched has only its log until the child writes spec.yaml
    if not ((full / RunDir.SPEC).is_file() or (full / RunDir.TELEMETRY).is_file()
            or (full / "studio-train.log").is_file()):
        raise Refused(404, f"no run dir `{rid}` under {root}")
    return full


def rel(root: Path, p: Path) -> str:
    return Path(p).resolve().relative_to(root).as_posix()


# --- reading run dirs (telemetry through mens.run.telemetry's reader) ---------------------------
def run_status(root: Path, run: Path, alive: bool) -> dict:
    rows = last(RunDir(run).telemetry)
    step = next((r for r in reversed(rows) if r.get("event") == Event.TRAIN_STEP), None)
    end = next((r["event"] for r in reversed(rows) if r.get("event") in TERMINAL), None)
    done = (run / RunDir.SUMMARY).is_file()
    state = "running" if alive else ("finished" if done else
                                     {Event.TRAIN_INTERRUPTED: "interrupted",
                                      Event.TRAIN_FAILED: "failed"}.get(end, "stopped"))
    gate = None
    if (run / RECEIPT).is_file():
        from mens.run.receipt import receipt_status
        gate = receipt_status(run)[0]
    spec = {}
    try:
        spec = RunDir(run).read_spec()
    except Exception:   # a run dir still being written
        pass
    return {"id": rel(root, run), "state": state, "gate": gate,
            "rung": (spec.get("rung") or {}).get("name"),
            "spoke": (spec.get("spoke") or {}).get("name"),
            **lane_fields(spec.get("lane") or None),
            "step": step and step.get("step"), "total": step and step.get("planned_steps_total"),
            "epoch": step and step.get("epoch"), "eta_s": step and step.get("eta_seconds_remaining"),
            "loss": step and step.get("loss"),
            "has_adapter": RunDir(run).artifact_kind == RunDir.ADAPTER,
            "mtime": (run / RunDir.TELEMETRY).stat().st_mtime
            if (run / RunDir.TELEMETRY).is_file() else 0}


# The studio's run list, found by RunDir.find: run dirs (telemetry.jsonl) one to three levels
# below the runs folder (<date>/<time>, a sweep's <date>/<time>/<job>), newest first, the 60
# newest; calibration records left out (they are not runs to serve or gate).
LISTED = {"depths": (1, 2, 3), "newest": True, "limit": 60}


# the chart's memory channel prefers the training window (what the plan predicts), hence
# window_peak_mb; without it the chart fell back to the process peak, loading included
SLIM = ("step", "epoch", "loss", "tokens_per_sec", "planned_peak_mb", "window_peak_mb",
        "peak_mem_mb", "rss_mb",
        "gpu_vram_used_mb", "cpu_util_pct", "gpu_util_pct", "sys_ram_used_mb", "planned_steps_total",
        "eta_seconds_remaining", "time")


def slim(row: dict) -> dict | None:
    """What the chart needs of a telemetry row (TRAIN_START carries the whole spec: not that)."""
    ev = row.get("event")
    if ev == Event.TRAIN_STEP:
        return {"event": ev, **{k: row.get(k) for k in SLIM if k in row}}
    if ev in (Event.CHECKPOINT, Event.CURRICULUM, Event.EVAL, *TERMINAL):
        return {k: v for k, v in row.items() if isinstance(v, (int, float, str, type(None)))}
    if ev == Event.TRAIN_START:
        return {"event": ev, "time": row.get("time"),
                "planned_peak_bytes": (row.get("plan") or {}).get("peak_bytes")}
    return None


# --- processes -----------------------------------------------------------------------------------
class Procs:
    """The children this studio started: {key: (Popen, run dir, kind, log)}. Signals go only to
    these, by their own pid — never to a process the studio did not start."""

    def __init__(self, root: Path):
        self.root = root
        self.children: dict[str, dict] = {}

    def spawn(self, kind: str, argv: list[str], out: Path, key: str | None = None) -> dict:
        out.mkdir(parents=True, exist_ok=True)
        log = open(out / f"studio-{kind}.log", "ab")
        proc = subprocess.Popen([sys.executable, *argv], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log.close()
        child = {"proc": proc, "dir": out, "kind": kind, "argv": argv, "started": time.time(),
                 "log": out / f"studio-{kind}.log"}
        self.children[key or str(out)] = child
        return child

    def alive(self, key: str) -> bool:
        c = self.children.get(key)
        return bool(c and c["proc"].poll() is None)

    def signal(self, key: str, sig: int) -> int:
        """Sends sig to that child's own pid (the trainer: rank 0); returns the pid."""
        c = self.children.get(key)
        if not c or c["proc"].poll() is not None:
            raise Refused(409, "that run's process is not running under this studio")
        c["proc"].send_signal(sig)
        return c["proc"].pid

    def stop_all(self) -> None:
        for c in self.children.values():
            if c["proc"].poll() is None:
                c["proc"].send_signal(signal.SIGINT)
        for c in self.children.values():
            try:
                c["proc"].wait(timeout=20)
            except subprocess.TimeoutExpired:
                c["proc"].kill()


def new_run_dir(root: Path, kind: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = root / "studio-jobs" / f"{stamp}_{kind}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def log_tail(path: Path, n: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
