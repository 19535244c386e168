"""`mens gate run=DIR` / `python -m mens.gate run=DIR`: before/after on the run's spoke,
collateral damage on every other spoke, `gate.json` in the run dir (mens.gate.run).
Exit 0: the run passes; 3: the gate refuses it (reasons printed and recorded)."""
from __future__ import annotations

from mens.cli.app import main as run


def main(argv: list[str] | None = None) -> int:
    from mens.gate.run import task
    return run(task, argv=argv, name="gate")
