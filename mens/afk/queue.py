"""The queue file and its control file, in the afk dir (`afk.dir`, default outputs/afk):

    queue.json     {version, created, updated, runner_pid, state, items: [item, ...]}
    control.json   {action: pause | abort, at}: written by `mens afk pause|abort`, read by
                   the running queue between items and while it watches a child
    queue.lock     flock'd by the one `mens afk` that runs this queue (freed by the kernel
                   when that process dies, SIGKILL included: a stale lock cannot outlive it)
    logs/<id>.log  each item's children's output, appended across attempts
    runs/<id>/     each item's run dir (hydra.run.dir of its training child)

An item: id, cell (rung/spoke), rung, spoke, state (pending | running | done | failed |
paused), run_dir, attempts, predicted_peak_bytes, memory_limit_bytes, timestamps (queued,
started, finished), exit_codes (one per child: step, code), steps (what base / data / train /
gate / promote did) and reason (why it failed or paused). Every write is whole-file atomic
(temp + rename): a crash leaves the previous queue.json or the new one, never half of one.
"""
from __future__ import annotations

import fcntl
import json
import os
from datetime import datetime, timezone
from pathlib import Path

from mens.errors import EXIT_REFUSED, MensError
from mens.run.rundir import atomic_write

STATES = ("pending", "running", "done", "failed", "paused")
OPEN = ("running", "paused", "pending")      # still to do; an interrupted item goes first
ACTIONS = ("pause", "abort")
QUEUE, CONTROL, LOCK = "queue.json", "control.json", "queue.lock"


class QueueBusy(MensError):
    """Another `mens afk` runs this queue (exit 3: refused, nothing changed)."""
    code = EXIT_REFUSED


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Queue:
    def __init__(self, afk_dir: Path | str):
        self.dir = Path(afk_dir).resolve()
        self.path = self.dir / QUEUE
        self.data = {"version": 1, "created": now(), "updated": now(), "runner_pid": None,
                     "state": "idle", "items": []}
        if self.path.is_file():
            self.data = json.loads(self.path.read_text())
        self._lock_fd: int | None = None

    # --- the file --------------------------------------------------------------------------
    @property
    def items(self) -> list[dict]:
        return self.data["items"]

    def save(self) -> None:
        self.data["updated"] = now()
        atomic_write(self.path, json.dumps(self.data, indent=2) + "\n")

    def item(self, item_id: str) -> dict:
        return next(i for i in self.items if i["id"] == item_id)

    def open_item(self, cell: str) -> dict | None:
        """The cell's item that is still to do, or the last one done (None: never queued)."""
        mine = [i for i in self.items if i["cell"] == cell]
        todo = [i for i in mine if i["state"] in OPEN]
        return todo[0] if todo else (mine[-1] if mine else None)

    def add(self, cell: str, rung: str, spoke: str, peak: int | None, overrides: list[str]
            ) -> dict:
        """A new pending item; its id is the cell's (a cell queued again gets `-2`, `-3`, ...)."""
        base = f"{rung}-{spoke}".replace("/", "_")
        taken = {i["id"] for i in self.items}
        item_id, n = base, 1
        while item_id in taken:
            n += 1
            item_id = f"{base}-{n}"
        item = {"id": item_id, "cell": cell, "rung": rung, "spoke": spoke, "state": "pending",
                "run_dir": str(self.dir / "runs" / item_id), "attempts": 0,
                "predicted_peak_bytes": peak, "memory_limit_bytes": None,
                "overrides": list(overrides), "queued": now(), "started": None,
                "finished": None, "exit_codes": [], "steps": {}, "reason": None}
        self.items.append(item)
        return item

    def todo(self) -> list[dict]:
        """Items still to run: the interrupted one(s) first, then pending by predicted peak."""
        rank = {"running": 0, "paused": 0, "pending": 1}
        return sorted((i for i in self.items if i["state"] in OPEN),
                      key=lambda i: (rank[i["state"]], i["predicted_peak_bytes"] or 0, i["id"]))

    # --- one runner at a time ----------------------------------------------------------------
    def lock(self) -> None:
        """Hold queue.lock for this process's life, or refuse (exit 3)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise QueueBusy(f"another `mens afk` (pid {self.data.get('runner_pid')}) is running "
                            f"the queue in {self.dir}: `mens afk status` shows it, `mens afk "
                            f"pause` / `abort` stop it; or use another afk.dir.") from None
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def runner_alive(self) -> bool:
        """True while some process holds queue.lock (the running `mens afk`)."""
        if not (self.dir / LOCK).is_file():
            return False
        fd = os.open(self.dir / LOCK, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)   # closing drops a lock this probe took
        return False


# --- control -----------------------------------------------------------------------------
def ask(afk_dir: Path | str, action: str) -> Path:
    if action not in ACTIONS:
        raise ValueError(f"afk action {action!r}: it is one of {', '.join(ACTIONS)}.")
    return atomic_write(Path(afk_dir) / CONTROL, json.dumps({"action": action, "at": now()}))


def asked(afk_dir: Path | str) -> str | None:
    """The action `mens afk pause|abort` asked for (None: none)."""
    path = Path(afk_dir) / CONTROL
    try:
        action = json.loads(path.read_text()).get("action")
    except (OSError, ValueError):
        return None
    return action if action in ACTIONS else None


def clear(afk_dir: Path | str) -> None:
    (Path(afk_dir) / CONTROL).unlink(missing_ok=True)


def describe(q: Queue) -> str:
    """`mens afk status`: the queue as a table, and whether a runner holds it now."""
    if not q.path.is_file():
        return f"no queue in {q.dir} (`mens afk afk.cells=[rung/spoke,…]` starts one)"
    alive = q.runner_alive()
    pending = asked(q.dir)
    runner = f"runner pid {q.data.get('runner_pid')}" if alive else "no runner"
    asks = f" · {pending} asked" if pending else ""
    head = f"queue {q.path} · {q.data['state']} · {runner}{asks} · updated {q.data['updated']}"
    rows = [("id", "cell", "state", "tries", "peak GiB", "exit codes", "run dir / reason")]
    for i in q.items:
        codes = " ".join(f"{c['step']}:{c['code']}" for c in i["exit_codes"]) or "-"
        peak = f"{i['predicted_peak_bytes'] / 1024 ** 3:.2f}" if i["predicted_peak_bytes"] else "-"
        rows.append((i["id"], i["cell"], i["state"], str(i["attempts"]), peak, codes,
                     i["reason"] or i["run_dir"]))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]) - 1)]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)) + "  " + r[-1] for r in rows]
    return "\n".join([head, *lines])
