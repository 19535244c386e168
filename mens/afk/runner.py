"""The queue's loop: select and plan the cells, then run the items one at a time.

Re-running `mens afk` on the same afk.dir resumes: items still open (running when the last
queue died, paused by an abort, pending) run first, the interrupted one before the rest, and
the new selection's cells that are not in the queue yet are added. Items done are never
retrained; failed ones only with afk.retry_failed=true.
"""
from __future__ import annotations

import os
import signal
import sys

from mens.afk import cells, steps
from mens.afk.queue import Queue, asked, clear
from mens.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_REFUSED, MensError

GiB = 1024 ** 3


def say(msg: str) -> None:
    print(f"mens afk: {msg}", flush=True)


def select(cfg, q: Queue) -> None:
    """Add the selection's new cells to the queue, each planned (smallest peak runs first;
    a cell that does not fit is recorded as failed, refused, and never started)."""
    afk = cfg.afk
    if afk.cells:
        chosen = [(r, s, None) for r, s in cells.parse(afk.cells)]
    else:
        chosen = cells.default_cells(cfg)
        say(f"the ladder has {len(chosen)} cell(s) missing or stale that fit: "
            + (", ".join(f"{r}/{s} ({st})" for r, s, st in chosen) or "nothing to do"))
    if afk.retry_failed:
        for item in q.items:
            if item["state"] == "failed":
                item.update(state="pending", attempts=0, reason=None)
    for rung, spoke, state in chosen:
        cell = f"{rung}/{spoke}"
        have = q.open_item(cell)
        if have is not None and have["state"] == "done" and state == "STALE":
            have = None   # the ladder says its run is stale: a new item trains it afresh
        if have is not None and have["state"] != "failed":
            if have["state"] == "done":
                say(f"{cell}: done already in this queue ({have['run_dir']}); not retrained")
            continue
        if have is not None and not afk.retry_failed:
            say(f"{cell}: failed earlier ({have['reason']}); afk.retry_failed=true runs it again")
            continue
        _, plan = cells.plan_cell(rung, spoke, afk.overrides)   # a bad cell: exit 2 before any run
        item = q.add(cell, rung, spoke, plan.peak_bytes, afk.overrides)
        if not plan.fits:
            item.update(state="failed", reason=f"plan: does not fit this machine "
                        f"({plan.peak_bytes / GiB:.2f} GiB predicted, "
                        f"{plan.budget_bytes / GiB:.2f} GiB budget)")
            item["exit_codes"].append({"step": "plan", "code": EXIT_REFUSED})


class Stopper:
    """SIGINT / SIGTERM to the queue: stop after interrupting the running child once.

    A Ctrl-C at the terminal reaches the whole foreground process group, the child included;
    a signal sent to the queue alone (kill, a service manager) is passed on by run_child."""

    def __init__(self):
        self.signalled = False
        self._previous = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._on)
            except ValueError:   # not the main thread: leave signals alone
                pass
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _on(self, signum, frame):
        self.signalled = True


def run_queue(cfg) -> int:
    afk = cfg.afk
    q = Queue(afk.dir)
    q.lock()   # exit 3 while another `mens afk` runs this queue
    try:
        clear(q.dir)   # this command means "run": an old pause/abort request is spent
        select(cfg, q)
        q.data.update(runner_pid=os.getpid(), state="running")
        q.save()
        with Stopper() as stopper:
            return _loop(cfg, q, stopper)
    finally:
        q.unlock()


def _loop(cfg, q: Queue, stopper: Stopper) -> int:
    todo = q.todo()
    say(f"{len(todo)} item(s) to run in {q.dir}: "
        + ", ".join(f"{i['cell']} ({(i['predicted_peak_bytes'] or 0) / GiB:.2f} GiB"
                    f"{', ' + i['state'] if i['state'] != 'pending' else ''})" for i in todo))

    def stop() -> bool:
        return stopper.signalled or asked(q.dir) == "abort"
    while True:
        action = "abort" if stopper.signalled else asked(q.dir)
        if action:
            q.data["state"] = "paused" if action == "pause" else "aborted"
            q.save()
            left = len(q.todo())
            say(f"{'paused' if action == 'pause' else 'aborted'} with {left} item(s) left; "
                f"`mens afk` (same afk.dir) resumes")
            return EXIT_OK if action == "pause" else EXIT_INTERRUPTED
        todo = q.todo()
        if not todo:
            break
        _run_item(cfg, q, todo[0], stop)
    failed = [i for i in q.items if i["state"] == "failed"]
    q.data["state"] = "done"
    q.save()
    say(f"finished: {sum(i['state'] == 'done' for i in q.items)} done, {len(failed)} failed"
        + "".join(f"\n  {i['cell']}: {i['reason']}" for i in failed))
    return EXIT_FAILED if failed else EXIT_OK


def _run_item(cfg, q: Queue, item: dict, stop) -> None:
    from mens.afk.queue import now

    afk = cfg.afk
    log = q.dir / "logs" / f"{item['id']}.log"
    item.update(state="running", attempts=item["attempts"] + 1, reason=None,
                started=item["started"] or now())
    if item["attempts"] > afk.max_attempts:
        item.update(state="failed", reason=f"started {afk.max_attempts} times without "
                    f"finishing (afk.max_attempts); its log: {log}")
        q.save()
        return
    q.save()
    say(f"{item['cell']}: attempt {item['attempts']} → {item['run_dir']} (log {log})")
    try:
        spec = steps.base(item, afk)
        q.save()
        steps.data(item, spec)
        q.save()
        steps.train(item, afk, spec, stop, log, q.save)
        q.save()
        passed = steps.gate(item, afk, cfg, stop, log, item["memory_limit_bytes"])
        q.save()
        steps.promote(item, afk, cfg, passed, log)
        item.update(state="done", finished=now())
    except steps.Stop:
        if item["state"] == "failed":
            item["finished"] = now()
    except MensError as e:   # anything else mens raises: the item fails, the queue goes on
        item.update(state="failed", reason=e.message, finished=now())
    q.save()
    print(f"mens afk: {item['cell']}: {item['state']}"
          f"{': ' + item['reason'] if item['reason'] else ''}", file=sys.stderr, flush=True)
