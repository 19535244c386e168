"""`mens serve` / `python -m mens.serve [run=<run dir>] [serve.*]`: the OpenAI-compatible server
(mens.serve.server); `promote SPOKE [SLOT]`, `rollback SPOKE`, `aliases` ask a running one."""
from __future__ import annotations

import sys

from mens.cli.app import main as run, usage_error
from mens.serve.server import ACTIONS


def main(argv: list[str] | None = None) -> int:
    from mens.serve.server import task
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a.lstrip("+~").split("=", 1)[0] == "serve.api_key" for a in argv):
        # refused before Hydra runs, which would save the key into .hydra/overrides.yaml
        return usage_error("`serve.api_key` is retired: a key on the command line is saved by "
                           "Hydra into .hydra/overrides.yaml and shell history. Export it instead "
                           "and name the variable: `export MENS_API_KEY=<key>` then "
                           "`serve.api_key_env=MENS_API_KEY`.")
    return run(task, argv=_argv(argv), name="serve")


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
