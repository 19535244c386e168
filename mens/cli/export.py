"""`mens export` / `python -m mens.export run=<run dir> [export.*]`: merged model, GGUFs, the
GGUF adapter and a Modelfile, written only into the export destination (mens.export.build)."""
from __future__ import annotations

import sys

from mens.cli.app import in_place, main as run


def main(argv: list[str] | None = None) -> int:
    from mens.export.build import task

    # no Hydra run dir under outputs/ and no log file: export writes only into its destination
    argv = in_place(sys.argv[1:] if argv is None else argv)
    return run(task, argv=argv, name="export")
