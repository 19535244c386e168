"""`mens cloud estimate|launch|catalog refresh [overrides]` / `python -m mens.cloud …`:
catalogue offers planned, timed and priced (estimate.json); a SkyPilot task for one (sky.yaml);
the offers catalogue rebuilt from SkyPilot's catalog CSVs. Each writes a run dir. No torch."""
from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig

from mens.cli.app import group_help, main as run, usage_error
from mens.errors import EXIT_OK

SUBCOMMANDS = ("estimate", "launch", "catalog refresh")


def estimate(cfg: DictConfig, out_dir: Path) -> int:
    from mens.cloud.estimate import estimate_run

    estimate_run(cfg, out_dir)
    return EXIT_OK


def launch(cfg: DictConfig, out_dir: Path) -> int:
    from mens.cloud.launch import launch_run

    return launch_run(cfg, out_dir)


def refresh(cfg: DictConfig, out_dir: Path) -> int:
    from mens.cloud.catalog import refresh as rebuild

    out = Path(cfg.cloud.catalog).expanduser() if cfg.cloud.catalog else out_dir / "offers.csv"
    r = rebuild(cfg.cloud.sky_catalogs, out)
    skipped = ", ".join(f"{g} ×{n}" for g, n in sorted(r["skipped_no_tier"].items())) or "none"
    print(f"mens cloud catalog refresh: {r['offers']} offers from {', '.join(r['read'])} → "
          f"{r['out']} (rows skipped, no hw tier: {skipped}). Use it with "
          f"`cloud.catalog={r['out']}`.")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if group_help(argv, __doc__):
        return EXIT_OK
    if argv[:1] == ["estimate"]:
        return run(estimate, argv=argv[1:], name="cloud_estimate")
    if argv[:1] == ["launch"]:
        return run(launch, argv=argv[1:], name="cloud_launch")
    if argv[:2] == ["catalog", "refresh"]:
        return run(refresh, argv=argv[2:], name="cloud_catalog")
    return usage_error(f"`mens cloud` takes a subcommand: {', '.join(SUBCOMMANDS)} (e.g. "
                       f"`mens cloud estimate +rung=8b lane=qlora`).")
