"""`mens afk [overrides]` / `python -m mens.afk …`: run (or resume) the unattended queue in
afk.dir; `mens afk status | pause | abort [afk.dir=…]` read or steer it (mens.afk).

No Hydra run dir of its own: the queue's home is afk.dir (queue.json, logs/, runs/), the same
for every invocation, so that a second `mens afk` finds what the first left."""
from __future__ import annotations

import sys

from mens.cli.app import command
from mens.errors import EXIT_OK

SUBCOMMANDS = ("status", "pause", "abort")


def main(argv: list[str] | None = None) -> int:
    # no Hydra app: a Hydra run dir per invocation would scatter what afk.dir keeps together
    argv = list(sys.argv[1:] if argv is None else argv)
    sub = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else None
    return command(_main, sub, argv)


def _main(sub: str | None, argv: list[str]) -> int:
    from mens.afk.queue import Queue, ask, describe
    from mens.config.compose import compose

    cfg = compose(argv)   # validated: afk.* ranges, unknown keys (exit 2)
    if sub is None:
        from mens.afk.runner import run_queue
        return run_queue(cfg)
    q = Queue(cfg.afk.dir)
    if sub == "status":
        print(describe(q))
        return EXIT_OK
    ask(q.dir, sub)
    when = "after the running item" if sub == "pause" else \
        "now (the running child checkpoints and stops)"
    running = "" if q.runner_alive() else " (no queue runs now: the next `mens afk` clears it)"
    print(f"mens afk: {sub} asked in {q.dir}: the queue stops {when}{running}")
    return EXIT_OK
