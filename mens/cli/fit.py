"""`mens fit` / `python -m mens.fit [overrides]`: calibration records → the contract's fitted
cells, and a report (mens.calibrate.fit)."""
from __future__ import annotations

from mens.cli.app import main as run


def main(argv: list[str] | None = None) -> int:
    from mens.calibrate.refit import task
    return run(task, argv=argv, name="fit")
