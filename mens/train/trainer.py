"""The Lightning Trainer a RunSpec asks for: precision, device, accumulation, clipping,
checkpoints (atomic, with the loader position), telemetry rows and the same numbers to every
logger (mens.train.loggers: wandb, csv, tensorboard or none), held-out evaluation every
`train.eval_every` steps through Lightning's validation loop.
"""
from __future__ import annotations

import time
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint, TQDMProgressBar

from mens.run.rundir import RunDir
from mens.train.loggers import make_loggers
from mens.train.strategy import lightning_devices, sum_over_ranks
from mens.run.telemetry import Event
from mens.train.telemetry import resource_readings

LIGHTNING_PRECISION = {"bf16": "bf16-mixed", "fp16": "16-mixed", "fp32": "32-true"}


# TRAIN_STEP field → the metric name every logger gets (x-axis: the optimizer step)
METRICS = {"loss": "train/loss", "learning_rate": "train/lr", "grad_norm": "train/grad_norm",
           "tokens_per_sec": "perf/tokens_per_sec", "real_tokens": "perf/real_tokens",
           "valid_tokens": "perf/supervised_tokens", "padding_pct": "perf/padding_pct",
           "eta_seconds_remaining": "perf/eta_s", "steps_per_sec_ema": "perf/steps_per_sec",
           "peak_mem_mb": "mem/peak_mb", "rss_mb": "mem/rss_mb",
           "gpu_vram_used_mb": "mem/gpu_vram_used_mb", "planned_peak_mb": "mem/planned_peak_mb",
           "window_peak_mb": "mem/window_peak_mb",
           "cpu_util_pct": "perf/cpu_util_pct", "gpu_util_pct": "perf/gpu_util_pct",
           "router_aux_loss": "train/router_aux_loss"}


class StepTelemetry(Callback):
    """One TRAIN_STEP row per optimizer step, and its numbers to every logger (METRICS)."""
    def __init__(self, tel, data, planned_steps: int, backend: str, planned_peak_bytes=None,
                 meter=None):
        self.tel, self.data, self.planned, self.backend = tel, data, planned_steps, backend
        self.meter = meter   # the training window's reading: what planned_peak_mb predicts
        self.planned_peak_mb = (round(planned_peak_bytes / 2**20, 1)
                                if planned_peak_bytes else None)
        self.t_last = time.time()
        self.ema = None
        self.step_seen = -1
        self.grad_norm = None
        self.trained_tokens = 0   # real tokens over every rank, this session (summary.json) ...
        self.train_seconds = 0.0  # ... in this many seconds of steps

    def on_train_start(self, trainer, module):
        self.t_last = time.time()   # after set-up (and, several ranks, their start): steps only

    def on_before_optimizer_step(self, trainer, module, optimizer):
        # the total 2-norm of the gradients, unscaled and before clipping (Lightning's helper)
        from lightning.pytorch.utilities import grad_norm

        from mens.train.strategy import grad_norm_sharded

        sharded = grad_norm_sharded(module)   # FSDP2: shards' squares summed over ranks
        if sharded is not None:
            self.grad_norm = sharded
            return
        norms = grad_norm(module, norm_type=2)
        total = norms.get("grad_2.0_norm_total")
        self.grad_norm = float(total) if total is not None else None

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step == self.step_seen or step == 0:   # only after an optimizer step
            return
        self.step_seen = step
        now = time.time()
        dt, self.t_last = now - self.t_last, now
        self.train_seconds += dt
        rate = 1.0 / dt if dt > 0 else None
        self.ema = rate if self.ema is None else 0.9 * self.ema + 0.1 * rate
        # every rank's tokens (a collective: each rank's callback runs here at this step)
        real, valid, slots = sum_over_ranks([module.counts[k] for k in ("real", "valid", "slots")])
        real, valid, slots = int(real), int(valid), int(slots)
        module.counts = {"real": 0, "valid": 0, "slots": 0}
        self.trained_tokens += real
        remaining = max(self.planned - step, 0)
        row = {"epoch": trainer.current_epoch, "step": step,
               "loss": float(module.last.get("loss", float("nan"))),
               "learning_rate": trainer.optimizers[0].param_groups[0]["lr"],
               "grad_norm": self.grad_norm,
               "tokens_per_sec": real / dt if dt > 0 else None, "valid_tokens": valid,
               "real_tokens": real,
               "padding_pct": 100.0 * (slots - real) / slots if slots else None,
               "supervised_ratio_pct": 100.0 * valid / real if real else None,
               "planned_peak_mb": self.planned_peak_mb,
               "window_peak_mb": _mb(self.meter.safe_read()) if self.meter else None,
               "planned_steps_total": self.planned,
               "eta_seconds_remaining": remaining / self.ema if self.ema else None,
               "progress_fraction": step / self.planned if self.planned else None,
               "steps_per_sec_ema": self.ema, **resource_readings(self.backend)}
        row.update({k: float(v) for k, v in module.last.items() if k != "loss"})
        self.tel.emit(Event.TRAIN_STEP, **row)
        metrics = {METRICS[k]: v for k, v in row.items() if k in METRICS and v is not None}
        metrics.update({f"train/{k}": v for k, v in row.items() if k.startswith("rewards/")})
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)


class HeldOutEval(Callback):
    """The validation loop's result: token-weighted held-out losses (eval, collateral) as an
    EVAL telemetry row each (model "training", with the step) and eval/… metrics."""
    def __init__(self, tel, sets: dict):
        self.tel, self.roles = tel, [(role, name) for role, (name, _) in sets.items()]

    def on_validation_epoch_start(self, trainer, module):
        module.val_sums = {}

    def on_validation_epoch_end(self, trainer, module):
        if trainer.sanity_checking:
            return
        metrics = {}
        for i, (role, name) in enumerate(self.roles):
            total, tokens = module.val_sums.get(i, (0.0, 0))
            loss = total / max(tokens, 1)
            self.tel.emit(Event.EVAL, model="training", step=trainer.global_step, split=role,
                          spoke=name, loss=loss, tokens=tokens)
            metrics[eval_metric(role)] = loss
        module.log("eval/loss", metrics.get("eval/loss", float("nan")), prog_bar=True,
                   logger=False)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)


def eval_metric(role: str) -> str:
    """eval → eval/loss, collateral → eval/collateral_loss."""
    return "eval/loss" if role == "eval" else f"eval/{role}_loss"


def log_eval(trainer, result: dict) -> None:
    """The final held-out numbers (evaluate.evaluate's result) as eval/… at the last step."""
    metrics = {eval_metric(role): r["loss"] for role, r in result.items()}
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=trainer.global_step)


class MensCheckpoint(ModelCheckpoint):
    """Lightning's atomic checkpoint (fsspec transaction), plus a CHECKPOINT telemetry row once
    last.ckpt holds the step. Lightning writes step<N>.ckpt first and last.ckpt second, and
    `resume=` reads last.ckpt: a row at the first write promised a step that a kill between the
    two writes could not continue from (seen: the row said 2, the resume went on from 1)."""
    def __init__(self, tel, **kw):
        super().__init__(**kw)
        self.tel = tel

    def _save_checkpoint(self, trainer, filepath):
        super()._save_checkpoint(trainer, filepath)
        if filepath == self.last_model_path:   # set by Lightning before it saves last.ckpt
            self.tel.emit(Event.CHECKPOINT, step=trainer.global_step, epoch=trainer.current_epoch,
                          path=str(filepath), world_size=trainer.world_size)


class Interrupt(Callback):
    """Ctrl-C: save last.ckpt before Lightning exits, so `resume=` continues from here."""
    def __init__(self, tel, path: Path):
        self.tel, self.path = tel, path

    def on_exception(self, trainer, module, exception):
        if isinstance(exception, KeyboardInterrupt):
            trainer.save_checkpoint(str(self.path))
            trainer.mens_interrupted = True
            self.tel.emit(Event.CHECKPOINT, step=trainer.global_step, epoch=trainer.current_epoch,
                          path=str(self.path), reason="interrupted", world_size=trainer.world_size)


def _mb(n: int | None) -> float | None:
    return None if n is None else round(n / 2**20, 1)


class CheckpointNow(Callback):
    """SIGUSR1 (the studio's "checkpoint now"): last.ckpt at the next optimizer step, a
    CHECKPOINT row with reason "requested", and training goes on. Under SLURM, SIGUSR1 is
    Lightning's requeue signal: left to it. Several ranks: the request (sent to rank 0) is
    summed over ranks every step, since saving a checkpoint is a collective."""
    def __init__(self, tel, path: Path):
        self.tel, self.path, self.asked, self.previous, self.step = tel, path, False, None, 0

    def on_train_start(self, trainer, module):
        import os
        import signal
        import threading

        self.step = trainer.global_step
        if (hasattr(signal, "SIGUSR1") and "SLURM_JOB_ID" not in os.environ
                and threading.current_thread() is threading.main_thread()):
            self.previous = signal.signal(signal.SIGUSR1, self._ask)

    def _ask(self, signum, frame):
        self.asked = True

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:            # accumulating: no step yet
            return
        self.step = trainer.global_step
        asked = self.asked
        if trainer.world_size > 1:
            asked = sum_over_ranks([float(asked)])[0] > 0
        if not asked:
            return
        self.asked = False
        trainer.save_checkpoint(str(self.path))
        self.tel.emit(Event.CHECKPOINT, step=trainer.global_step, epoch=trainer.current_epoch,
                      path=str(self.path), reason="requested", world_size=trainer.world_size)

    def on_train_end(self, trainer, module):
        import signal
        if self.previous is not None:
            signal.signal(signal.SIGUSR1, self.previous)
            self.previous = None


class _No4bitKernel:
    """bitsandbytes' "Failed to load CPU gemm_4bit_forward … pip install kernels" (logged when
    it is imported): a lane without 4-bit weights never calls that kernel, so it is dropped;
    on a 4-bit lane mens says what it means, once, in its own words."""
    def __init__(self, four_bit: bool):
        self.four_bit, self.said = four_bit, False

    def filter(self, record) -> bool:
        if "gemm_4bit" not in record.getMessage():
            return True
        if self.four_bit and not self.said:
            import sys
            self.said = True
            print("mens: note: bitsandbytes' optional fast CPU 4-bit kernel is not installed "
                  "(`pip install kernels`); 4-bit layers use its portable path", file=sys.stderr)
        return False


def quiet_libraries(spec=None) -> None:
    """Lightning's INFO banners (device list, a product tip) and two third-party deprecation
    warnings about the libraries' own internals say nothing about this run; mens prints its
    plan and progress instead. bitsandbytes' missing CPU 4-bit kernel: said only on a 4-bit
    lane (_No4bitKernel). Warnings about the run itself still show."""
    import logging
    import warnings

    logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)
    bnb = logging.getLogger("bitsandbytes.backends.cpu.ops")
    for f in [f for f in bnb.filters if isinstance(f, _No4bitKernel)]:
        bnb.removeFilter(f)
    bnb.addFilter(_No4bitKernel(spec is not None and spec.lane.method == "qlora"))
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*is deprecated.*")


def build_trainer(spec, plan, out_dir: Path, tel, data, trainable: int,
                  extra_callbacks: list | None = None, job_type: str = "train",
                  eval_sets: dict | None = None, meter=None):
    """meter: the run's memory window (mens.train.meter), read into every TRAIN_STEP row.
    extra_callbacks go first (mens.train.run.RunHooks): their batch-end runs before any
    checkpoint is written at that step. With train.eval_every > 0 the validation loop scores
    the held-out sets every that many optimizer steps (Lightning counts batches, hence the
    grad_accum factor)."""
    planned = data.planned_steps()
    run = RunDir(out_dir)
    ckpt = MensCheckpoint(tel, dirpath=str(run.checkpoints), filename="step{step:06d}",
                          every_n_train_steps=spec.train.checkpoint_every, save_last=True,
                          save_top_k=1, monitor="step", mode="max", auto_insert_metric_name=False)
    callbacks = [*(extra_callbacks or []),
                 StepTelemetry(tel, data, planned, spec.hw.backend, plan.peak_bytes, meter),
                 ckpt, Interrupt(tel, run.last_checkpoint),
                 CheckpointNow(tel, run.last_checkpoint), TQDMProgressBar()]
    if spec.train.eval_every and eval_sets:
        callbacks.insert(len(extra_callbacks or []) + 1, HeldOutEval(tel, eval_sets))
    trainer = L.Trainer(
        accelerator=spec.hw.lightning.accelerator, **lightning_devices(spec, out_dir),
        # each rank's rows come from MensData (strategy.rank_items): Lightning's automatic
        # DistributedSampler would shuffle the training rows even with shuffle=False
        use_distributed_sampler=False,
        precision=LIGHTNING_PRECISION[spec.lane.precision], max_epochs=spec.curriculum.epochs,
        max_steps=spec.train.max_steps, accumulate_grad_batches=spec.train.grad_accum,
        gradient_clip_val=spec.train.grad_clip or None, callbacks=callbacks,
        logger=make_loggers(spec, out_dir, plan, job_type), log_every_n_steps=1,
        default_root_dir=str(out_dir), reload_dataloaders_every_n_epochs=1,
        num_sanity_val_steps=0, **validation(spec),
        enable_model_summary=False, deterministic=False)
    trainer.mens_interrupted = False
    return trainer, ckpt


def validation(spec) -> dict:
    """The Trainer's validation settings: off, or every train.eval_every optimizer steps."""
    every = spec.train.eval_every
    if not every:
        return {"limit_val_batches": 0}
    return {"val_check_interval": every * spec.train.grad_accum, "check_val_every_n_epoch": None}
