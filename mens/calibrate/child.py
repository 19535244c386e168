"""The measurement child of `mens.calibrate` (mens.calibrate.measure starts it as
`python -m mens.calibrate.child <run dir>`): a fresh interpreter that compiles the job's config,
runs `mens.train.run.train_run` unchanged with the meter's RunHooks, and writes what it read
(measure.json; measure.rank<r>.json for each rank > 0, which the strategy's launcher starts by
running this module again). Also the random weights a qlora measurement loads, written by a
child of their own so the measurement starts clean.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mens.errors import EXIT_FAILED
from mens.run.rundir import atomic_write
from mens.train.strategy import RUN_DIR_ENV


def write_random_weights(rung: dict, target: str, seed: int) -> None:
    """Seeded random weights of the rung's family (bf16 on disk: values do not matter, bytes on
    disk do) plus the embedded tiny tokenizer (ids < 4096 fit every rung's vocabulary)."""
    import torch

    from mens.model.load import causal_lm_class, hf_config
    from mens.resources import ASSETS

    torch.manual_seed(seed)
    config = hf_config(rung)
    model = causal_lm_class(config.model_type)(config).to(torch.bfloat16)
    tmp = Path(f"{target}.tmp{os.getpid()}")
    model.save_pretrained(str(tmp), safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ASSETS / "tiny" / name, tmp / name)
    os.replace(tmp, target)


def child_main(run_dir: str) -> None:
    """One measurement, in a fresh interpreter: compile, hook, train_run, report."""
    import traceback

    from mens.train.meter import meter_for, window_callback

    out_dir = Path(run_dir)
    job = json.loads((out_dir / "calibrate_job.json").read_text())
    report = {"window_started": False, "window_complete": False, "steps": []}
    # ranks > 0 (started by rank 0's launcher with LOCAL_RANK set) keep readings of their own
    rank = int(os.environ.get("LOCAL_RANK") or 0)
    name = "measure.json" if rank == 0 else f"measure.rank{rank}.json"

    def say(**kw):   # atomic_write, not RunDir's (which writes on rank 0 only)
        report.update(kw)
        atomic_write(out_dir / name, json.dumps(report))

    cfg = _child_config(job)
    set_hydra_job(job["hydra"])
    import lightning  # noqa: F401  (heavy imports before the baseline: they are not the step)

    import mens.model.load  # noqa: F401
    import mens.train.trainer  # noqa: F401
    if cfg.logger.kind == "wandb":
        import wandb  # noqa: F401
    from mens.plan.spec import compile_run
    from mens.train.run import RunHooks, train_run

    spec, plan = compile_run(cfg, "train")
    meter = meter_for(spec.hw.backend)
    say(kind=meter.kind)
    # the window callback goes first: its batch-end reading precedes any checkpoint written there
    hooks = RunHooks(before_base=lambda: say(baseline_bytes=meter.baseline()),
                     callbacks=[window_callback(meter, cfg.calibrate.steps, say)])
    try:
        train_run(spec, plan, out_dir, hooks=hooks, job_type="calibrate")
    except BaseException as e:   # recorded for the parent, then the child fails loudly
        say(error=f"{type(e).__name__}: {str(e)[:500]}", window_peak_bytes=meter.safe_read())
        traceback.print_exc()
        sys.exit(EXIT_FAILED)


def _child_config(job: dict) -> DictConfig:
    from mens.config.schema import MensConfig, register

    register()
    raw = job["config"]
    if job.get("weights"):   # qlora on random weights: load them as a local snapshot
        raw["rung"].update(init="pretrained", path=job["weights"])
    return OmegaConf.merge(OmegaConf.structured(MensConfig), raw)


def set_hydra_job(bits: dict) -> None:
    """The parent's Hydra job facts, so the trainer's wandb group (one per sweep) is the same
    one a normal `-m` run would get."""
    from hydra.conf import HydraConf
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = OmegaConf.structured(HydraConf)
    hc.mode = RunMode[bits["mode"]]
    if bits.get("sweep_dir"):
        hc.sweep.dir = bits["sweep_dir"]
    hc.runtime.output_dir = bits["run_dir"]
    # what the strategy's launcher reads to start ranks > 0 (child_command): this cwd, a name
    hc.runtime.cwd = os.getcwd()
    hc.job.name = "calibrate"
    HydraConfig.instance().set_config(OmegaConf.create({"hydra": hc}))


if __name__ == "__main__":   # the measurement child (run_child), and each rank > 0 it starts
    child_main(os.environ.get(RUN_DIR_ENV) or sys.argv[1])
