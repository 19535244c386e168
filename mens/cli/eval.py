"""`mens eval run=DIR` / `python -m mens.eval run=DIR` (a base alone: `+rung=NAME`, no run=):
standard benchmarks, in-domain oracle pass@k, collateral spokes, an optional judge — each metric
with its interval — into eval.json + eval.md (mens.eval.run)."""
from __future__ import annotations

from mens.cli.app import main as run


def main(argv: list[str] | None = None) -> int:
    from mens.eval.run import task
    return run(task, argv=argv, name="eval")
