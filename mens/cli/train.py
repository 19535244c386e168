"""`mens train` / `python -m mens [overrides]`: compile, plan, then train.

`rerun=<run dir>` re-launches a run from its spec.yaml (or its first telemetry row) into a new
run dir; `resume=<run dir>` continues that run, in place, from its last checkpoint.

Under a launcher (torchrun, srun: mens.train.launched) the same command is one rank of the run:
hw.nodes/hw.devices are checked against the launcher's world, every rank trains into the run
dir the launch names, and an elastic restart of the same launch resumes from last.ckpt.
"""
from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig

from mens.cli.app import main as run
from mens.errors import EXIT_OK, ConfigError


def task(cfg: DictConfig, out_dir: Path) -> int:
    from mens.plan.spec import load_rerun
    from mens.train.launched import attempt, expect, launched, rank_output

    resume, source = cfg.resume, cfg.rerun or cfg.resume
    if source:
        _no_other_overrides("resume" if resume else "rerun")
        cfg = load_rerun(source)
    world = launched()
    if world is not None and not source and attempt(out_dir, world):
        # torchrun restarted the group (--max-restarts): this launch's run, from its checkpoint
        print(f"mens: note: {world.label} restarted this launch: resuming {out_dir} from "
              f"{out_dir / 'checkpoints' / 'last.ckpt'}", file=sys.stderr)
        resume = source = str(out_dir)
        cfg = load_rerun(source)
    if world is not None:
        expect(cfg, world)   # hw.nodes / hw.devices against the launcher's world: exit 2
    with rank_output(world):
        return _train(cfg, out_dir, resume, source)


def _train(cfg, out_dir: Path, resume, source) -> int:
    from mens.plan.output import plan_run
    from mens.train.run import train_run

    if resume:
        out_dir = Path(resume)   # continue in place
    spec, plan = plan_run(cfg, out_dir, "train", write=not resume)
    if source:
        spec = _data_changes(spec, source, out_dir, write=not resume)
    summary = train_run(spec, plan, out_dir, resume=bool(resume))
    print(f"mens: done in {summary['duration_s']:.0f} s · eval loss {summary['eval_loss_base']:.3f}"
          f" (base) → {summary['eval_loss_adapter']:.3f} ({summary['lane']}) on "
          f"{summary['eval_records']} held-out {summary['data']} records · {out_dir}")
    return EXIT_OK


def _data_changes(spec, source: str, out_dir: Path, write: bool):
    """A rerun/resume whose data files changed since the run: said, and kept in the notes."""
    from dataclasses import replace

    from mens.data.select import lock_changes
    from mens.plan.output import write_spec
    from mens.run.rundir import RunDir

    said = lock_changes(RunDir(source).read_spec().get("data_lock") or [], spec.data_lock)
    for line in said:
        print(f"mens: note: {line} (since {source})", file=sys.stderr)
    if not said:
        return spec
    spec = replace(spec, notes=spec.notes + tuple(f"DATA_CHANGED: {x}" for x in said))
    if write:
        write_spec(RunDir(out_dir), spec)
    return spec


def _no_other_overrides(what: str) -> None:
    """rerun/resume take the run's own spec: any other override would be silently ignored."""
    from hydra.core.hydra_config import HydraConfig

    from mens.config.compose import DEFAULT_GROUPS

    injected = {f"+{g}={o}" for g, o in DEFAULT_GROUPS.items()}
    extra = [o for o in HydraConfig.get().overrides.task
             if o not in injected and not o.startswith((f"{what}=", "hydra."))]
    if extra:
        raise ConfigError(f"{what}= re-launches the run exactly as its spec says, so "
                          f"{' '.join(extra)} would be ignored: drop them, or start a new run "
                          f"with the changed settings.", key=what)


def main(argv: list[str] | None = None) -> int:
    from mens.cli.app import print_error
    from mens.train.launched import hydra_args

    try:   # a launched rank: the launch's run dir, and rank 0 alone writes there
        argv = hydra_args(list(sys.argv[1:] if argv is None else argv), "train")
    except ConfigError as e:
        print_error(e)
        return e.code
    return run(task, argv=argv, name="train")
