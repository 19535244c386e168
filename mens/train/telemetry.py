"""telemetry.jsonl's writer: one JSON object per event, append-only, flushed as it is written.

The events and their rows are mens.run.telemetry's vocabulary (Event, and a TypedDict per
event), read back by its reader. The first row (resolved spec, plan, git commit, package
versions, host) alone re-launches the run (`rerun=<dir>`). A reading a backend cannot give is
`null`, never a made-up 0.
"""
from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import time
from pathlib import Path

from mens.run.rundir import rank_zero
from mens.run.telemetry import Event

ROOT = Path(__file__).resolve().parent.parent.parent   # the source checkout, when there is one


class Telemetry:
    """Appends rows to telemetry.jsonl. Only rank 0 writes; other ranks' rows are returned
    but not written (one run, one file)."""
    def __init__(self, path: Path):
        self.path = Path(path)
        self._f = None
        if rank_zero():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "a", buffering=1)   # line-buffered: every row reaches disk

    def emit(self, event: Event, **fields) -> dict:
        # Event(...) raises on a name outside the vocabulary: a misspelt event is a bug to see
        # at once, not a row no reader ever matches
        row = {"event": Event(event).value, "time": time.time(), **fields}
        if self._f is not None:
            self._f.write(json.dumps(row, default=_jsonable) + "\n")
            self._f.flush()
        return row

    def close(self) -> None:
        if self._f is not None:
            self._f.close()


def _jsonable(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    return str(o)


def git_commit() -> dict:
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                                  timeout=10).stdout.strip() or None
        except OSError:
            return None
    if not (ROOT / "pyproject.toml").is_file():   # an installed mens: no checkout to ask
        return {"commit": None, "dirty": None}
    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no")) if commit else None
    return {"commit": commit, "dirty": dirty}


def host() -> dict:
    return {"hostname": socket.gethostname(), "platform": platform.platform(),
            "python": platform.python_version(), "cpus": os.cpu_count()}


def resource_readings(device: str) -> dict:
    """Memory/utilisation now. CPU: RSS high-water mark; CUDA: allocator peak + NVML if any."""
    import psutil

    proc = psutil.Process()
    out = {"cpu_util_pct": psutil.cpu_percent(interval=None),
           "sys_ram_used_mb": round(psutil.virtual_memory().used / 2**20, 1),
           "peak_mem_mb": None, "gpu_util_pct": None, "gpu_vram_used_mb": None}
    if device == "cuda":
        import torch
        out["peak_mem_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        out["gpu_vram_used_mb"] = round(torch.cuda.memory_reserved() / 2**20, 1)
        try:
            out["gpu_util_pct"] = torch.cuda.utilization()
        except Exception:   # no NVML: the reading does not exist, so it stays null
            pass
    elif device == "mps":
        import torch
        out["gpu_vram_used_mb"] = round(torch.mps.driver_allocated_memory() / 2**20, 1)
        out["peak_mem_mb"] = out["gpu_vram_used_mb"]
    else:
        import resource
        # ru_maxrss is KiB on Linux, bytes on macOS
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out["peak_mem_mb"] = round(rss / (2**20 if platform.system() == "Darwin" else 2**10), 1)
        out["rss_mb"] = round(proc.memory_info().rss / 2**20, 1)
    return out
