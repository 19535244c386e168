"""The Lightning Trainer a RunSpec asks for: precision, device, accumulation, clipping,
checkpoints (atomic, with the loader position), telemetry rows, wandb (offline) / csv / none.
"""
from __future__ import annotations

import time
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint, TQDMProgressBar

from mens.rundir import RunDir
from mens.train.telemetry import resource_readings

LIGHTNING_PRECISION = {"bf16": "bf16-mixed", "fp16": "16-mixed", "fp32": "32-true"}


class StepTelemetry(Callback):
    """One TRAIN_STEP row per optimizer step."""
    def __init__(self, tel, data, planned_steps: int, backend: str):
        self.tel, self.data, self.planned, self.backend = tel, data, planned_steps, backend
        self.t_last = time.time()
        self.ema = None
        self.step_seen = -1

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step == self.step_seen or step == 0:   # only after an optimizer step
            return
        self.step_seen = step
        now = time.time()
        dt, self.t_last = now - self.t_last, now
        rate = 1.0 / dt if dt > 0 else None
        self.ema = rate if self.ema is None else 0.9 * self.ema + 0.1 * rate
        real, valid = module.counts["real"], module.counts["valid"]
        module.counts = {"real": 0, "valid": 0}
        remaining = max(self.planned - step, 0)
        row = {"epoch": trainer.current_epoch, "step": step,
               "loss": float(module.last.get("loss", float("nan"))),
               "learning_rate": trainer.optimizers[0].param_groups[0]["lr"],
               "tokens_per_sec": real / dt if dt > 0 else None, "valid_tokens": valid,
               "supervised_ratio_pct": 100.0 * valid / real if real else None,
               "planned_steps_total": self.planned,
               "eta_seconds_remaining": remaining / self.ema if self.ema else None,
               "progress_fraction": step / self.planned if self.planned else None,
               "steps_per_sec_ema": self.ema, **resource_readings(self.backend)}
        row.update({k: float(v) for k, v in module.last.items() if k != "loss"})
        self.tel.emit("TRAIN_STEP", **row)


class MensCheckpoint(ModelCheckpoint):
    """Lightning's atomic checkpoint (fsspec transaction), plus a CHECKPOINT telemetry row."""
    def __init__(self, tel, **kw):
        super().__init__(**kw)
        self.tel = tel

    def _save_checkpoint(self, trainer, filepath):
        super()._save_checkpoint(trainer, filepath)
        self.tel.emit("CHECKPOINT", step=trainer.global_step, epoch=trainer.current_epoch,
                      path=str(filepath))


class Interrupt(Callback):
    """Ctrl-C: save last.ckpt before Lightning exits, so `resume=` continues from here."""
    def __init__(self, tel, path: Path):
        self.tel, self.path = tel, path

    def on_exception(self, trainer, module, exception):
        if isinstance(exception, KeyboardInterrupt):
            trainer.save_checkpoint(str(self.path))
            trainer.mens_interrupted = True
            self.tel.emit("CHECKPOINT", step=trainer.global_step, epoch=trainer.current_epoch,
                          path=str(self.path), reason="interrupted")


def loggers(spec, out_dir: Path, plan):
    kind = spec.logger
    if kind == "none":
        return False
    if kind == "csv":
        from lightning.pytorch.loggers import CSVLogger
        return CSVLogger(str(out_dir), name="csv", version="")
    from lightning.pytorch.loggers import WandbLogger
    import os
    os.environ.setdefault("WANDB_MODE", "offline")   # no network needed; `wandb sync` later
    os.environ.setdefault("WANDB_SILENT", "true")
    tags = [f"hw:{spec.hw.name}", f"rung:{spec.rung.name}", f"spoke:{spec.spoke.name}",
            f"lane:{spec.lane.kind}", f"curriculum:{spec.curriculum.name}"]
    group = sweep_group()
    logger = WandbLogger(project="mens", save_dir=str(out_dir), name=out_dir.name, tags=tags,
                         group=group, config=spec.to_dict(), mode=os.environ["WANDB_MODE"])
    logger.experiment.summary.update({"predicted_peak_bytes": plan.peak_bytes,
                                      "plan_verdict": plan.verdict})
    return logger


def close_loggers(trainer, summary: dict | None = None, exit_code: int = 0) -> None:
    """Final numbers into the wandb summary, then finish the run: in a Hydra sweep the jobs
    share one process, and an unfinished wandb run would swallow the next job's logging."""
    from lightning.pytorch.loggers import WandbLogger

    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger):
            if summary:
                flat = {k: v for k, v in summary.items() if not isinstance(v, dict)}
                flat.update({f"collateral/{k}": v for k, v in summary.get("collateral", {}).items()})
                logger.experiment.summary.update(flat)
            logger.experiment.finish(exit_code=exit_code)


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


def quiet_libraries() -> None:
    """Lightning's INFO banners (device list, a product tip) and two third-party deprecation
    warnings about the libraries' own internals say nothing about this run; mens prints its
    plan and progress instead. Warnings about the run itself still show."""
    import logging
    import warnings

    logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*is deprecated.*")


def build_trainer(spec, plan, out_dir: Path, tel, data, trainable: int,
                  extra_callbacks: list | None = None):
    """extra_callbacks go first (mens.train.run.RunHooks): their batch-end runs before any
    checkpoint is written at that step."""
    planned = data.planned_steps()
    run = RunDir(out_dir)
    ckpt = MensCheckpoint(tel, dirpath=str(run.checkpoints), filename="step{step:06d}",
                          every_n_train_steps=spec.train.checkpoint_every, save_last=True,
                          save_top_k=1, monitor="step", mode="max", auto_insert_metric_name=False)
    callbacks = [*(extra_callbacks or []), StepTelemetry(tel, data, planned, spec.hw.backend),
                 ckpt, Interrupt(tel, run.last_checkpoint), TQDMProgressBar()]
    trainer = L.Trainer(
        accelerator=spec.hw.lightning.accelerator, devices=spec.hw.lightning.devices, strategy=spec.hw.lightning.strategy,
        precision=LIGHTNING_PRECISION[spec.lane.precision], max_epochs=spec.curriculum.epochs,
        max_steps=spec.train.max_steps, accumulate_grad_batches=spec.train.grad_accum,
        gradient_clip_val=spec.train.grad_clip or None, callbacks=callbacks,
        logger=loggers(spec, out_dir, plan), log_every_n_steps=1, default_root_dir=str(out_dir),
        reload_dataloaders_every_n_epochs=1, num_sanity_val_steps=0, limit_val_batches=0,
        enable_model_summary=False, deterministic=False)
    trainer.mens_interrupted = False
    return trainer, ckpt
