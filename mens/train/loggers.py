"""The run's loggers (Lightning's own: wandb, csv, tensorboard, or none), what they are named,
and what reaches them beside the per-step metrics: the run summary and the adapter artifact.

wandb runs are offline unless WANDB_MODE says otherwise (`wandb sync` later). The project is
`logger.project`, else $WANDB_PROJECT, else `mens`; the entity `logger.entity`, else
$WANDB_ENTITY (wandb reads it). A run is named `<rung>-<spoke>-<lane>-<HHMMSS>`, plus the
overrides that vary in a sweep; the runs of one sweep share a group; job_type says what ran
(train / calibrate), and the resolved spec is the run's config, nested (lane.method, train.seq_len).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mens.config.schema import DEFAULT_WANDB_PROJECT
from mens.config.objectives import label as lane_label, lane_fields
from mens.run.rundir import artifact_name, wandb_artifact


def project(spec) -> str:
    return spec.logger.project or os.environ.get("WANDB_PROJECT") or DEFAULT_WANDB_PROJECT


def _data(spec) -> str:
    """The spoke's name, or the user's data (`file:<stem>`, a dataset id)."""
    from mens.data.select import data_label, user_data

    return data_label(spec.data) if user_data(spec) else spec.spoke.name


def tags(spec) -> list[str]:
    out = [f"hw:{spec.hw.name}", f"rung:{spec.rung.name}", f"spoke:{spec.spoke.name}",
           f"lane:{lane_label(spec.lane)}", f"curriculum:{spec.curriculum.name}"]
    return out + ([f"data:{_data(spec)}"] if _data(spec) != spec.spoke.name else [])


def run_name(spec, started: float | None = None) -> str:
    """`<rung>-<spoke or data>-<lane>-<HHMMSS>`; a sweep job adds the overrides that vary
    across the sweep and are not already in the name (`…-train.seq_len=512`)."""
    stamp = time.strftime("%H%M%S", time.localtime(started or time.time()))
    name = f"{spec.rung.name}-{_data(spec).replace(':', '_').replace('/', '_')}-" \
           f"{spec.lane.name}-{stamp}"
    said = {"rung", "+rung", "spoke", "lane"}
    extra = [f"{k}={v}" for k, v in sweep_overrides() if k.lstrip("+~") not in said]
    return "-".join([name, *extra])


def sweep_overrides() -> list[tuple[str, str]]:
    """(key, this job's value) of each override the sweep varies (`lane=lora,qlora` on the
    command line), parsed with Hydra's own override parser; [] outside a multirun."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.core.override_parser.overrides_parser import OverridesParser

        hc = HydraConfig.get()
        if str(hc.mode) != "RunMode.MULTIRUN":
            return []
        parser = OverridesParser.create()
        argv = [a for a in sys.argv[1:] if "=" in a and not a.startswith("-")]
        varying = {o.get_key_element() for o in parser.parse_overrides(argv)
                   if o.is_sweep_override()}
        job = parser.parse_overrides(list(hc.overrides.task))
        return [(o.get_key_element(), o.get_value_element_as_str()) for o in job
                if o.get_key_element() in varying]
    except Exception:   # not under Hydra (tests calling train_run directly), or no task list
        return []


def sweep_group():
    try:
        from hydra.core.hydra_config import HydraConfig
        hc = HydraConfig.get()
        if str(hc.mode) == "RunMode.MULTIRUN":   # outputs/multirun/<date>/<time> → <date>_<time>
            sweep = Path(hc.sweep.dir)
            return f"{sweep.parent.name}_{sweep.name}"
    except Exception:   # not under Hydra (tests calling train_run directly)
        pass
    return None


def make_loggers(spec, out_dir: Path, plan, job_type: str = "train"):
    """Lightning logger(s) for `spec.logger.kind`; False for none."""
    kind = spec.logger.kind
    if kind == "none":
        return False
    if kind == "csv":
        from lightning.pytorch.loggers import CSVLogger
        return CSVLogger(str(out_dir), name="csv", version="")
    if kind == "tensorboard":
        from lightning.pytorch.loggers import TensorBoardLogger
        return TensorBoardLogger(str(out_dir), name="tensorboard", version="",
                                 default_hp_metric=False)
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    os.environ.setdefault("WANDB_MODE", "offline")   # no network needed; `wandb sync` later
    os.environ.setdefault("WANDB_SILENT", "true")
    # wandb.init here, not through WandbLogger's own: that one passes `anonymous=`, which
    # wandb ≥0.19 answers with a deprecation warning on every run
    run = wandb.init(project=project(spec), entity=spec.logger.entity, dir=str(out_dir),
                     name=run_name(spec), group=sweep_group(), job_type=job_type,
                     tags=tags(spec), config=spec.to_dict(), mode=os.environ["WANDB_MODE"],
                     reinit="create_new")
    run.define_metric("trainer/global_step")
    for prefix in ("train", "perf", "mem", "eval"):   # every curve against the optimizer step
        run.define_metric(f"{prefix}/*", step_metric="trainer/global_step")
    run.summary.update({"predicted_peak_bytes": plan.peak_bytes, "plan_verdict": plan.verdict})
    return WandbLogger(experiment=run)


def log_summary(trainer, summary: dict) -> None:
    """The run's final numbers: wandb's run summary; the other loggers get the eval losses and
    the peaks as metrics at the last step."""
    from lightning.pytorch.loggers import WandbLogger

    flat = {k: v for k, v in summary.items() if not isinstance(v, (dict, str))}
    flat.update({f"collateral/{k}": v for k, v in (summary.get("collateral") or {}).items()
                 if not isinstance(v, str)})
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger):
            logger.experiment.summary.update({**flat, "spoke": summary["spoke"],
                                              "lane": summary["lane"], "rung": summary["rung"]})
        else:
            logger.log_metrics({f"summary/{k}": v for k, v in flat.items() if v is not None},
                               step=trainer.global_step)


def log_weights(trainer, path: Path, spec) -> None:
    """The adapter (or the full lane's weights) as a wandb artifact the run produced; offline
    runs keep it in the run's files and `wandb sync` uploads it with the run."""
    from lightning.pytorch.loggers import WandbLogger

    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger):
            import wandb   # only with a wandb logger: logger=none needs no wandb installed

            kind = artifact_name(spec.lane.method)
            # mens.export.lineage and mens.compare.lineage use it by this name (mens.run)
            art = wandb.Artifact(wandb_artifact(kind, logger.experiment.id), type=kind,
                                 metadata={"rung": spec.rung.name, "spoke": spec.spoke.name,
                                           **lane_fields(spec.lane)})
            art.add_dir(str(path))
            logger.experiment.log_artifact(art, aliases=["latest"])


def close_loggers(trainer, summary: dict | None = None, exit_code: int = 0) -> None:
    """Final numbers into the summary, then finish the run: in a Hydra sweep the jobs share
    one process, and an unfinished wandb run would swallow the next job's logging."""
    from lightning.pytorch.loggers import WandbLogger

    if summary:
        log_summary(trainer, summary)
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger):
            logger.experiment.finish(exit_code=exit_code)
        else:
            logger.finalize("success" if exit_code == 0 else "failed")

