"""`mens ladder` / `python -m mens.ladder [+hw=…] [lane=…] [ladder.runs=DIR]`: every rung × spoke
cell's state (TRAINED+GATED, TRAINED·UNGATED, TRAIN_NOT_RUN, STALE, BASE_SNAPSHOT_ABSENT,
DOES_NOT_FIT_LOCAL) as a table, and `ladder.json` in the run dir (mens.ladder.state).
Imports no torch."""
from __future__ import annotations

from mens.cli.app import main as run


def main(argv: list[str] | None = None) -> int:
    from mens.ladder.state import task
    return run(task, argv=argv, name="ladder")
