"""The run's lifecycle: a RunSpec + Plan → a finished run directory (mens.rundir.RunDir).

    TRAIN_START → DATA → CURRICULUM → EVAL (base) → fit → adapter/ or model/ → EVAL (adapter)
    → TRAIN_COMPLETE → summary.json (written last and atomically: a dir without it is unfinished)

Callers that measure a run (calibration) hook in through RunHooks — a fixed point before the
base loads and extra Lightning callbacks — never by replacing this module's functions.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mens.errors import DataError, Interrupted, MensError
from mens.rundir import RunDir
from mens.train.telemetry import Telemetry, git_commit, host


@dataclass
class RunHooks:
    """Where a caller may hook into train_run. before_base(): right before the base model
    loads (after data and tokenizer). callbacks: Lightning callbacks put first in the
    trainer's list (their batch-end runs before any checkpoint is written)."""
    before_base: Callable[[], None] | None = None
    callbacks: list = field(default_factory=list)


def train_run(spec, plan, out_dir: Path, resume: bool = False,
              hooks: RunHooks | None = None, job_type: str = "train") -> dict:
    """job_type: what the wandb run is (train; calibrate for mens.calibrate's measured runs)."""
    import lightning as L
    import torch

    from mens.data.corpus import is_pair, load_spoke
    from mens.data.curriculum import epoch_counts
    from mens.data.examples import examples_for
    from mens.data.pack import mask_dtype_for, packing_stats
    from mens.model.load import load_model, load_tokenizer, trainable_count
    from mens.train.evaluate import base_from_telemetry, eval_sets, evaluate, evaluate_base
    from mens.train.meter import meter_for
    from mens.train.module import MensData, MensModule, reference_logps
    from mens.train.loggers import close_loggers, log_weights
    from mens.train.trainer import build_trainer, log_eval, quiet_libraries

    hooks = hooks or RunHooks()
    quiet_libraries(spec)
    run = RunDir(out_dir)
    tel = Telemetry(run.telemetry)
    notes = list(spec.notes)
    if not resume:
        tel.emit("TRAIN_START", spec=spec.to_dict(), plan=plan.to_dict(), git=git_commit(),
                 versions=spec.versions, host=host(), argv=sys.argv)
    else:
        tel.emit("RESUME", checkpoint=str(run.last_checkpoint))
    for n in notes:
        if n.startswith("GPU_FALLBACK"):
            print(f"mens: {n}", file=sys.stderr)
            tel.emit("GPU_FALLBACK", detail=n)
    L.seed_everything(spec.train.seed, workers=True, verbose=False)
    torch.use_deterministic_algorithms(spec.hw.backend == "cpu", warn_only=True)

    tokenizer = load_tokenizer(spec.rung, notes)
    pairs = spec.lane.kind == "dpo"
    records, data_stats = load_spoke(spec.spoke, split="train", seed=spec.train.seed)
    kept = [r for r in records if is_pair(r) == pairs]   # dpo trains on pairs, SFT on the rest
    data_stats[f"excluded_{'sft' if pairs else 'pair'}_records"] = len(records) - len(kept)
    records = kept
    phases = list(spec.curriculum.phases)
    examples, tok_stats = examples_for(records, tokenizer, spec, phases, pairs)
    tel.emit("DATA", **{**data_stats, **tok_stats, "spoke": spec.spoke.name})
    skipped = tok_stats["unsupervised_records_skipped"]
    if skipped:   # counted in the DATA row, said on the console
        print(f"mens: skipped {skipped} of {len(records)} {spec.spoke.name} records whose answer "
              f"lies wholly beyond train.seq_len={spec.train.seq_len} (no token to learn from)",
              file=sys.stderr)
    if not examples:
        raise DataError(f"no {spec.spoke.name} record keeps an answer token within "
                        f"train.seq_len={spec.train.seq_len}: raise train.seq_len (or leave it "
                        f"auto).", key="train.seq_len")
    records = [r for r in records if r["id"] in examples]
    sets = eval_sets(spec, tokenizer)

    meter = meter_for(spec.hw.backend)     # the peak as calibration measures it (meter.py)

    def before_base():
        meter.baseline()                   # what is resident before the model loads
        if hooks.before_base:
            hooks.before_base()
    model, _ = load_model(spec, notes, before_base=before_base, tokenizer=tokenizer)
    trainable, total = trainable_count(model)
    data = MensData(spec, examples, records, pairs, mask_dtype_for(model.config),
                    eval_sets=sets if spec.train.eval_every else None)
    counts = epoch_counts(records, list(spec.curriculum.caps), phases)
    for e, c in enumerate(counts):
        extra = {} if pairs or not spec.train.packing else packing_stats(data.epochs[e])
        tel.emit("CURRICULUM", epoch=e, cap=spec.curriculum.caps[min(e, len(spec.curriculum.caps) - 1)],
                 **c, **extra)
    base_eval = evaluate_base(model, sets, spec, tel) if not resume else None
    ref = reference_logps(model, list(examples.values()), spec) if pairs else None
    module = MensModule(model, spec, data.position, data.planned_steps(), ref)
    trainer, _ = build_trainer(spec, plan, run.path, tel, data, trainable,
                               extra_callbacks=hooks.callbacks, job_type=job_type,
                               eval_sets=sets)
    last = run.last_checkpoint
    t0 = time.time()
    meter.start()                          # loading and the base evaluation stay outside
    try:
        trainer.fit(module, datamodule=data, ckpt_path=str(last) if resume and last.exists() else None)
    except SystemExit:
        close_loggers(trainer, exit_code=Interrupted.code)
        if getattr(trainer, "mens_interrupted", False):
            tel.emit("TRAIN_INTERRUPTED", exit_code=Interrupted.code, step=trainer.global_step,
                     checkpoint=str(last))
            raise Interrupted(f"interrupted: checkpoint saved to {last}; resume with "
                              f"`python -m mens resume={run}`.") from None
        raise
    except MensError as e:   # e.g. a non-finite loss: recorded, then exit with its code
        close_loggers(trainer, exit_code=e.code)
        kept = str(last) if last.exists() else None
        tel.emit("TRAIN_FAILED", exit_code=e.code, step=trainer.global_step, message=e.message,
                 checkpoint=kept)
        e.message += (f" The last checkpoint before the failure is {kept}." if kept else
                      " No checkpoint had been written yet (train.checkpoint_every).")
        raise
    duration = time.time() - t0
    train_peak = meter.safe_read()
    saved = _save_outputs(model, tokenizer, spec, run)
    after = evaluate(model, sets, tel, "adapter")
    log_eval(trainer, after)
    if base_eval is None:   # resumed: the base numbers are in the first run's EVAL rows
        base_eval = base_from_telemetry(run.telemetry_rows("EVAL"))
    summary = _summary(spec, plan, base_eval, after, trainer, duration, trainable, total,
                       train_peak, meter.kind)
    tel.emit("TRAIN_COMPLETE", **summary)
    log_weights(trainer, saved, spec)
    close_loggers(trainer, summary)
    tel.close()
    run.write_json(RunDir.SUMMARY, summary)
    return summary


def _save_outputs(model, tokenizer, spec, run: RunDir) -> Path:
    """adapter/ (PEFT) or model/ (full), written to a temp dir and renamed into place."""
    def save(tmp: Path) -> None:
        model.save_pretrained(str(tmp), safe_serialization=True)
        if spec.lane.kind == "full":
            tokenizer.save_pretrained(str(tmp))
    which = RunDir.MODEL if spec.lane.kind == "full" else RunDir.ADAPTER
    return run.save_dir(which, save)


def _summary(spec, plan, base, after, trainer, duration, trainable, total, train_peak,
             peak_kind) -> dict:
    import resource
    # the training window's peak above the pre-model baseline: the quantity the planner
    # predicts and calibration fits, so the two compare; the whole process's too, on CPU
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    process = rss * (1 if sys.platform == "darwin" else 1024)   # bytes on macOS, KiB on Linux
    return {
        "spoke": spec.spoke.name, "lane": spec.lane.kind, "rung": spec.rung.name,
        "eval_loss_base": base["eval"]["loss"], "eval_loss_adapter": after["eval"]["loss"],
        "eval_improvement_pct": 100 * (1 - after["eval"]["loss"] / base["eval"]["loss"]),
        "eval_records": after["eval"]["records"], "eval_tokens": after["eval"]["tokens"],
        "collateral": {"spoke": after["collateral"]["spoke"],
                       "eval_loss_base": base["collateral"]["loss"],
                       "eval_loss_adapter": after["collateral"]["loss"],
                       "records": after["collateral"]["records"],
                       "tokens": after["collateral"]["tokens"]},
        "steps": trainer.global_step, "epochs": trainer.current_epoch,
        "duration_s": round(duration, 2), "trainable_params": trainable, "total_params": total,
        "predicted_peak_bytes": plan.peak_bytes, "measured_peak_bytes": train_peak,
        "measured_peak_kind": peak_kind, "process_peak_rss_bytes": process,
    }
