"""`mens studio` / `python -m mens.studio [studio.port=P] [studio.runs=DIR]`: the local web app
over the ladder, recipes and the live plan, jobs and their telemetry, data, gates and serving
(mens.studio). 127.0.0.1 by default; another studio.host needs studio.token_env (else exit 2)."""
from __future__ import annotations

from mens.cli.app import main as run


def main(argv: list[str] | None = None) -> int:
    from mens.studio.server import task
    return run(task, argv=argv, name="studio")
