"""`mens export` / `python -m mens.export run=<run dir> [export.*]`: merged model, GGUFs, the
GGUF adapter and a Modelfile, written only into the export destination (mens.export.build)."""
from __future__ import annotations

import sys

from mens.cli.app import main as run


def main(argv: list[str] | None = None) -> int:
    from mens.export.build import task

    argv = list(sys.argv[1:] if argv is None else argv)
    # no Hydra run dir under outputs/ and no log file: export writes only into its destination
    for extra in ("hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=none",
                  "hydra/hydra_logging=none"):
        if not any(a.startswith(extra.split("=")[0] + "=") for a in argv):
            argv.append(extra)
    return run(task, argv=argv, name="export")
