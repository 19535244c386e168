"""`mens serve` / `python -m mens.serve [run=<run dir>] [serve.*]`: the OpenAI-compatible server
(mens.serve.server); `promote SPOKE [SLOT]`, `rollback SPOKE`, `aliases` ask a running one."""
from __future__ import annotations

import sys

from mens.cli.app import main as run
from mens.serve.server import ACTIONS


def main(argv: list[str] | None = None) -> int:
    from mens.serve.server import task
    return run(task, argv=_argv(list(sys.argv[1:] if argv is None else argv)), name="serve")


def _argv(argv: list[str]) -> list[str]:
    """`promote SPOKE [SLOT]` / `rollback SPOKE` / `aliases` → serve.admin* overrides."""
    if not argv or argv[0] not in ACTIONS:
        return argv
    words = []
    rest = list(argv[1:])
    while rest and "=" not in rest[0] and not rest[0].startswith("-"):
        words.append(rest.pop(0))
    out = [f"serve.admin={argv[0]}"]
    out += [f"serve.{k}={v}" for k, v in zip(("admin_spoke", "admin_slot"), words)]
    return out + rest
