"""One child process of the queue (a training, a gate, a promotion), started and watched.

The child runs at low priority (os.nice(afk.nice) before exec) in the queue's own process
group, so killing that group stops both. Its output is appended to the item's log.

Memory: RLIMIT_AS cannot bound a torch process — torch and its allocators map huge virtual
areas they never touch — so the limit is on what is resident: every `afk.poll_s` the RSS of
the child and of all its descendants (a multi-process run's ranks) is summed with psutil;
above the limit the whole tree is killed (SIGKILL: a process growing past its plan must not
take the machine with it) and the child is recorded as stopped for memory. Between two polls
a child can overshoot; the limit is a guard against a run far off its plan, not a hard cap.

Abort: when `mens afk abort` is asked (control.json) or the queue itself is told to stop, the
child gets one SIGINT — mens checkpoints and exits 130 — and the queue waits for it.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass
class Outcome:
    code: int                  # the child's exit code (-9: killed by signal 9)
    peak_rss_bytes: int        # the tree's RSS high-water mark, as polled
    stopped: str | None = None   # "memory" | "interrupt": why the queue stopped it


def tree_rss(pid: int) -> int:
    """RSS of a process and its descendants, in bytes (0: gone)."""
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.Error:   # ended between listing and reading
            pass
    return total


def _kill_tree(pid: int) -> None:
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [*p.children(recursive=True), p]
    except psutil.Error:
        return
    for q in procs:
        try:
            q.kill()
        except psutil.Error:
            pass


def _lower_priority(n: int) -> Callable[[], None] | None:
    if n <= 0:
        return None

    def lower():   # in the child, before exec: only async-signal-safe work
        os.nice(n)
    return lower


def run_child(argv: list[str], log: Path, nice: int, limit_bytes: int | None, poll_s: float,
              stop: Callable[[], bool], started: Callable[[int], None] | None = None) -> Outcome:
    """Run argv to its end; stop() is asked every poll whether to interrupt it (SIGINT once)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("HYDRA_FULL_ERROR", None)   # the child prints mens's one-paragraph errors
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, preexec_fn=_lower_priority(nice))
    if started:
        started(proc.pid)
    peak, stopped = 0, None
    while True:
        try:
            code = proc.wait(timeout=poll_s)
            break
        except subprocess.TimeoutExpired:
            pass
        rss = tree_rss(proc.pid)
        peak = max(peak, rss)
        if limit_bytes and rss > limit_bytes:
            _kill_tree(proc.pid)
            stopped = "memory"
            code = proc.wait()
            break
        if stopped is None and stop():
            stopped = "interrupt"
            try:
                proc.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
    return Outcome(code=code, peak_rss_bytes=peak, stopped=stopped)


def python_m(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def last_error(log: Path, limit: int = 400) -> str:
    """The child's last `mens: error` line (else its last line), for the item's reason."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    errors = [ln for ln in lines if ln.startswith("mens: error")]
    text = (errors or lines or [""])[-1]
    return text[:limit]

