"""`python -m mens [overrides]`: compile, plan, then train.

`python -m mens rerun=<run dir>` re-launches a run from its spec.yaml alone.
"""
from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig


def task(cfg: DictConfig, out_dir: Path) -> int:
    from mens.plan import plan_run
    from mens.spec import load_rerun

    if cfg.rerun:
        cfg = load_rerun(cfg.rerun)
    spec, plan = plan_run(cfg, out_dir, "train")
    # The training stage (Lightning + PEFT) is issue #3; until it lands mens stops here, loudly.
    print(f"mens: training is not built yet (issue #3): stopped after planning. "
          f"spec.yaml and plan.json are in {out_dir}", file=sys.stderr)
    return 0


def main() -> None:
    from mens.cli import main as run

    sys.exit(run(task, name="train"))


if __name__ == "__main__":
    main()
