"""`mens afk [overrides]` / `python -m mens.afk …`: run (or resume) the unattended queue in
afk.dir; `mens afk status | pause | abort [afk.dir=…]` read or steer it (mens.afk).

No Hydra run dir of its own: the queue's home is afk.dir (queue.json, logs/, runs/), the same
for every invocation, so that a second `mens afk` finds what the first left."""
from __future__ import annotations

import sys

from mens.errors import EXIT_INTERRUPTED, EXIT_OK, MensError

SUBCOMMANDS = ("status", "pause", "abort")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    sub = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else None
    try:
        return _main(sub, argv)
    except KeyboardInterrupt:   # while planning, before the queue's own handlers
        print("mens: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:   # one paragraph and mens's exit code, as every command
        err = e if isinstance(e, MensError) else _explained(e)
        print(f"mens: error (exit {err.code}): {err.message}", file=sys.stderr)
        return err.code


def _explained(e: Exception) -> MensError:
    import os

    from mens.config.explain import explain
    from mens.errors import RunFailed

    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise e
    try:
        return explain(e)
    except Exception:
        return RunFailed(f"unexpected {type(e).__name__}: {e} (HYDRA_FULL_ERROR=1 shows the "
                         f"full trace; please report it)")


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


if __name__ == "__main__":
    sys.exit(main())
