"""`mens compare` / `python -m mens.compare run=<dir>` (base vs fine-tuned) or `… A B 'glob'`
(runs side by side): mens.compare.core."""
from __future__ import annotations

import sys

from mens.cli.app import main as run


def main(argv: list[str] | None = None) -> int:
    from mens.compare.core import task
    return run(task, argv=_argv(list(sys.argv[1:] if argv is None else argv)), name="compare")


def _argv(argv: list[str]) -> list[str]:
    """Bare paths/globs (no `=`) → `compare.runs=[...]`, so `python -m mens.compare A B` works."""
    paths = [a for a in argv if "=" not in a and not a.startswith("-")]
    if not paths:
        return argv
    quoted = ",".join("'" + p.replace("\\", "\\\\").replace("'", "\\'") + "'" for p in paths)
    return [a for a in argv if a not in paths] + [f"compare.runs=[{quoted}]"]
