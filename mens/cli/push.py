"""`mens push` / `python -m mens.push run=<run dir> push.repo=<org/name> [push.*]`: a finished
run's adapter (or full model), card, merged model and GGUFs to the Hugging Face Hub
(mens.push.run), assembled first into <run dir>/push/ (push.dry_run=true stops there)."""
from __future__ import annotations

import sys

from mens.cli.app import in_place, main as run


def main(argv: list[str] | None = None) -> int:
    from mens.push.run import task

    # no Hydra run dir under outputs/ and no log file: push writes only into <run dir>/push/
    argv = in_place(sys.argv[1:] if argv is None else argv)
    return run(task, argv=argv, name="push")
