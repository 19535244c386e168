"""`mens launch torchrun|slurm|kubeflow [overrides]`: the file that engine needs to start
`python -m mens <the same overrides>` on hw.nodes × hw.devices (mens.launch.<engine>), written
into this run's dir and printed, after the plan (spec.yaml, plan.json: a run that does not fit
is refused with exit 3 before any file names it). No torch; nothing is started.

`mens launch ray [overrides]` is the one executor: after the same checks and plan it starts
the ranks itself on a Ray cluster and waits for them (mens.launch.ray; Ray imported only then)."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

from omegaconf import DictConfig

from mens.cli.app import command, group_help, main as run, usage_error
from mens.errors import EXIT_OK

EMITTERS = {"torchrun": "mens.launch.torchrun", "slurm": "mens.launch.slurm",
            "kubeflow": "mens.launch.kubeflow"}
EXECUTORS = {"ray": "mens.launch.ray"}


def emit(engine: str, argv: list[str]):
    def task(cfg: DictConfig, out_dir: Path) -> int:
        from mens.launch.common import Launch, write
        from mens.plan.output import plan_run

        module = importlib.import_module(EMITTERS[engine])
        text = module.render(Launch(cfg, out_dir.resolve(), list(argv)))   # config errors: 2
        plan_run(cfg, out_dir, "plan")   # the plan per device of hw.nodes × hw.devices; refuses: 3
        write(out_dir, module.FILE, text)
        print(text, end="")
        return EXIT_OK
    return task


def execute(engine: str, argv: list[str]):
    def task(cfg: DictConfig, out_dir: Path) -> int:
        from mens.launch.common import Launch
        from mens.plan.output import plan_run

        module = importlib.import_module(EXECUTORS[engine])
        job = module.prepare(Launch(cfg, out_dir.resolve(), list(argv)))   # config errors: 2
        plan_run(cfg, out_dir, "plan")   # a run that does not fit starts no worker: 3
        return module.execute(job)       # the run's own failure: 4
    return task


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if group_help(argv, __doc__):
        return EXIT_OK
    if argv[:1] and argv[0] in {**EMITTERS, **EXECUTORS}:
        from mens.launch.common import refuse_flags

        engine, rest = argv[0], argv[1:]
        flagged = command(refuse_flags, rest, engine)   # before Hydra reads -m as a sweep
        if flagged != EXIT_OK:
            return flagged
        task = emit(engine, rest) if engine in EMITTERS else execute(engine, rest)
        return run(task, argv=rest, name=f"launch_{engine}")
    return usage_error(f"`mens launch` takes an engine: {', '.join([*EMITTERS, *EXECUTORS])} (e.g. "
                       f"`mens launch slurm +hw=h100 hw.devices=8 hw.nodes=2 +rung=8b lane=full`).")
