"""`mens recommend [overrides]` / `python -m mens.recommend …`: recommendation.md for one
machine (e.g. `+hw=m_series hw.memory_gb=128`): every rung × lane planned on it, the GGUF type
to run each with, the cheapest catalogue offer for what does not fit. No torch."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from mens.cli.app import main as run
from mens.errors import EXIT_OK


def task(cfg: DictConfig, out_dir: Path) -> int:
    from mens.recommend.memo import recommend_run

    recommend_run(cfg, out_dir)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    return run(task, argv=argv, name="recommend")
