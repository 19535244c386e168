"""`mens plan` / `python -m mens.plan [overrides]`: compile and plan only — the plan table,
spec.yaml and plan.json. Imports no torch/transformers on a named tier (under a second)."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from mens.cli.app import main as run
from mens.errors import EXIT_OK


def task(cfg: DictConfig, out_dir: Path) -> int:
    from mens.plan.output import plan_run

    plan_run(cfg, out_dir, "plan")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    return run(task, argv=argv, name="plan")
