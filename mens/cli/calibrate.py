"""`mens calibrate` / `python -m mens.calibrate [overrides]` (also `-m`): measure one shape's
real peak memory in a child process → calibration.json (mens.calibrate.measure)."""
from __future__ import annotations

from mens.cli.app import main as run


def main(argv: list[str] | None = None) -> int:
    from mens.calibrate.measure import task
    return run(task, argv=argv, name="calibrate")
