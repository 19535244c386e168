"""`make calibrate-gpu` / `python -m mens.cli.calibrate_gpu [--dry-run --tier T] [--budget-s S]
[overrides]`: the CUDA cells measured on one GPU within a time budget (mens.calibrate.gpu).
No Hydra app of its own (each job is one: mens.calibrate.measure), so it goes through
`command` for the printer and exit codes every mens command shares."""
from __future__ import annotations

import sys

from mens.cli.app import command


def main(argv: list[str] | None = None) -> int:
    from mens.calibrate.gpu import main as calibrate_gpu
    return command(calibrate_gpu, sys.argv[1:] if argv is None else list(argv))


if __name__ == "__main__":
    sys.exit(main())
