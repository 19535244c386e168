"""The run's lifecycle: a RunSpec + Plan → a finished run directory (mens.run.rundir.RunDir).

    TRAIN_START → DATA → CURRICULUM → EVAL (base) → fit → adapter/ or model/ → EVAL (adapter)
    → TRAIN_COMPLETE → summary.json (written last and atomically: a dir without it is unfinished)

Callers that measure a run (calibration) hook in through RunHooks — a fixed point before the
base loads and extra Lightning callbacks — never by replacing this module's functions.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mens.errors import ConfigError, DataError, Interrupted, MensError
from mens.run.rundir import RunDir, artifact_name, rank_zero
from mens.run.telemetry import Event
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

    from mens.data.prepare import prepare_data
    from mens.model.load import load_model, load_tokenizer, trainable_count
    from mens.objective import build as build_objective
    from mens.train import allocator
    from mens.train.evaluate import loop_sets
    from mens.train.meter import meter_for, window_opener
    from mens.train.module import MensModule
    from mens.train.strategy import RUN_DIR_ENV, release, world
    from mens.train.trainer import build_trainer, quiet_libraries

    hooks = hooks or RunHooks()
    # a rank that rank 0 started trains into rank 0's run dir, whatever its own Hydra resolved
    out_dir = Path(os.environ.get(RUN_DIR_ENV) or out_dir)
    devices, nodes, strategy = world(spec)
    size = devices * nodes
    quiet_libraries(spec)
    heap, trims = _heap(spec)
    run = RunDir(out_dir)
    tel = Telemetry(run.telemetry)
    _start(spec, plan, run, tel, resume, heap, size, strategy)
    L.seed_everything(spec.train.seed, workers=True, verbose=False)
    torch.use_deterministic_algorithms(spec.hw.backend == "cpu", warn_only=True)

    notes = list(spec.notes)
    tokenizer = load_tokenizer(spec.rung, notes)
    objective = build_objective(spec)      # what the lane trains toward (mens.objective)
    prepared = prepare_data(spec, tokenizer, objective.pairs)   # the data stage, once
    tel.emit(Event.DATA, **prepared.stats)
    meter = meter_for(spec.hw.backend)     # the peak as calibration measures it (meter.py)

    def before_base():
        if spec.train.heap == "fixed":
            allocator.trim()               # freed heap pages back: the baseline is what is used
        meter.baseline()                   # what is resident before the model loads
        if hooks.before_base:
            hooks.before_base()
    model, _ = load_model(spec, notes, before_base=before_base, tokenizer=tokenizer)
    if trims and spec.lane.gradient_checkpointing:   # the heap's layer by layer (allocator)
        allocator.layer_trims(model.get_decoder().layers, trims)
    data, router = _datamodule(model, spec, objective, prepared, notes, tel, heap)
    trainable, total = trainable_count(model)
    if objective.prompts:                  # grpo: the step samples its own answers
        objective.bind(model, tokenizer, prepared.records, prepared.encoder)
    for e, c in enumerate(prepared.counts):
        extra = data.row_stats[e] if data.row_stats else {}
        tel.emit(Event.CURRICULUM, epoch=e, cap=spec.curriculum.caps[min(e, len(spec.curriculum.caps) - 1)],
                 **c, **extra)
    base_eval, refs = _before_training(model, spec, tel, objective, prepared, resume)
    _reference_pass(objective, model, spec, prepared.examples, data)
    module = MensModule(model, spec, data.position, data.planned_steps(), objective,
                        router=router)
    # loading, the base evaluation and (on resume) the checkpoint restore stay outside the window
    opener = window_opener(meter, allocator.trim if spec.train.heap == "fixed" else None)
    callbacks = [opener, *hooks.callbacks, *([allocator.step_trim(trims)] if trims else [])]
    trainer, _ = build_trainer(spec, plan, run.path, tel, data, trainable,
                               extra_callbacks=callbacks, job_type=job_type,
                               eval_sets=loop_sets(prepared.sets), meter=meter)
    t0 = time.time()
    try:
        return _fit_and_finish(trainer, module, data, model, tokenizer, spec, plan, run, tel,
                               meter, prepared, refs, base_eval, (trainable, total), t0,
                               strategy, size, resume, trims)
    finally:   # every way out: the process group closed, the launcher's environment cleared
        release()


def _heap(spec) -> tuple[dict, object]:
    """(the TRAIN_START row's allocator, allocator.Trims or None): train.heap (resolved by the
    plan) is glibc's own, or a fixed 8 MiB mmap threshold and a trim before every micro-batch
    (mens.train.allocator)."""
    from mens.train import allocator

    heap = (allocator.configure(spec.hw.backend) if spec.train.heap == "fixed"
            else {"allocator": "default"})
    trims = allocator.Trims() if heap.get("set") else None
    if trims:
        heap["trim"] = "before every micro-batch" + (
            "; before each decoder layer's forward and backward (checkpointing)"
            if spec.lane.gradient_checkpointing else "")
    return heap, trims


def _start(spec, plan, run: RunDir, tel, resume: bool, heap: dict, size: int,
           strategy: str) -> None:
    """The run's first rows: TRAIN_START (or RESUME, at the world size that wrote the
    checkpoint), and the spec's GPU fallbacks, said."""
    from mens.train.launched import launched

    # the launcher that started the ranks (torchrun, srun), if not mens: its launch identity is
    # how an elastic restart knows this run is its own (mens.train.launched.attempt)
    w = launched()
    launch = {"launch": w.record()} if w is not None else {}
    if not resume:
        tel.emit(Event.TRAIN_START, spec=spec.to_dict(), plan=plan.to_dict(), git=git_commit(),
                 versions=spec.versions, host=host(), argv=sys.argv, allocator=heap,
                 world_size=size, strategy=strategy, **launch)
    else:
        _same_world(run, size)
        tel.emit(Event.RESUME, checkpoint=str(run.last_checkpoint), world_size=size, **launch)
    for n in spec.notes:
        if n.startswith(Event.GPU_FALLBACK):
            print(f"mens: {n}", file=sys.stderr)
            tel.emit(Event.GPU_FALLBACK, detail=n)


def _datamodule(model, spec, objective, prepared, notes: list, tel, heap: dict):
    """(MensData, RouterAux or None): the attention path this model allows for the prepared
    examples (packed rows, per-record attention, or each record padded alone), its PATHS row,
    and what loading did other than the spec said (NOTE rows, said)."""
    from mens.data.pack import mask_dtype_for
    from mens.train.attention import window_masks
    from mens.train.datamodule import MensData, packing_refusal
    from mens.train.evaluate import loop_sets
    from mens.train.router import RouterAux

    pairs, prompts = objective.pairs, objective.prompts
    packing = spec.train.packing and not pairs and not prompts
    refused = packing_refusal(model) if packing else ""   # the plan normally turned it off
    if refused:
        packing = False
        notes.append(f"FALLBACK packing: {refused}; each record is padded alone (train.packing "
                     f"off for this family)")
    packed = packing and spec.train.attention == "per_record"
    if packed:   # attention per packed record (no b·s² mask), where the model allows it
        from mens.train.attention import use_packed_attention
        packed, why = use_packed_attention(model, spec.train.seq_len)
        if not packed:
            notes.append(f"FALLBACK attention: {why}")
    router = RouterAux.of(model)           # a mixture of experts' load-balancing loss
    if router is not None:
        notes.append(router.note)
    attention = ("per_record" if packed else "block_mask"
                 if spec.train.packing and not pairs and not refused else "padded")
    tel.emit(Event.PATHS, attention=attention, loss=spec.train.loss, heap=heap)   # this run's
    for n in notes[len(spec.notes):]:   # what loading did other than the spec said: loud, kept
        print(f"mens: note: {n}", file=sys.stderr)
        tel.emit(Event.NOTE, detail=n)
    data = MensData(spec, prepared.examples, prepared.records, pairs,
                    mask_dtype_for(model.config),
                    eval_sets=loop_sets(prepared.sets) if spec.train.eval_every else None,
                    block_mask=not packed, prompts=prompts, packing=packing,
                    token_mask=router is not None,
                    windows=window_masks(model.config, spec.train.seq_len) if packing else None)
    return data, router


def _before_training(model, spec, tel, objective, prepared, resume: bool):
    """(the base's EVAL numbers or None, held-out pairs' reference log-probs (dpo)). The base's
    numbers come from rank 0 (the other ranks' would be the same); a resumed run has them in
    the first run's rows."""
    from mens.train.evaluate import evaluate_base, objective_held_out, pair_references

    refs: dict = {}
    base_eval = (evaluate_base(model, prepared.sets, spec, tel, refs)
                 if not resume and rank_zero() else None)
    if base_eval is not None:   # grpo: the greedy oracle pass rate before training
        objective.before = objective_held_out(objective, model, prepared.held_out, tel, "base")
    if resume:   # held-out pairs' references: the policy before the checkpoint is restored
        refs = {r: pair_references(model, s[1], spec) for r, s in prepared.sets.items()
                if s[1] and isinstance(s[1][0], tuple)}
    return base_eval, refs


def _reference_pass(objective, model, spec, examples: dict, data) -> None:
    """The objective's pass on the initial weights (dpo: the reference, over the pairs the
    planned steps reach)."""
    from mens.train.module import reference_scorer

    c = objective.card
    if not c.needs_reference(spec.lane) or c.reference_in_step:
        return
    score = reference_scorer(model, spec)
    try:
        objective.prepare(score, list(examples.values()),
                          {_index(x) for x in data.reached()} if objective.pairs else None)
    finally:
        score.done()


def _fit_and_finish(trainer, module, data, model, tokenizer, spec, plan, run, tel, meter,
                    prepared, refs, base_eval, params, t0, strategy, size, resume, trims=None):
    from mens.train.evaluate import base_from_telemetry, evaluate
    from mens.train.loggers import close_loggers, log_weights
    from mens.train.strategy import distributed, full_state_dict, share
    from mens.train.trainer import StepTelemetry, log_eval

    last = run.last_checkpoint
    try:
        trainer.fit(module, datamodule=data, ckpt_path=str(last) if resume and last.exists() else None)
    except SystemExit:
        close_loggers(trainer, exit_code=Interrupted.code)
        if getattr(trainer, "mens_interrupted", False):
            tel.emit(Event.TRAIN_INTERRUPTED, exit_code=Interrupted.code, step=trainer.global_step,
                     checkpoint=str(last))
            raise Interrupted(f"interrupted: checkpoint saved to {last}; resume with "
                              f"`python -m mens resume={run}`.") from None
        raise
    except MensError as e:   # e.g. a non-finite loss: recorded, then exit with its code
        close_loggers(trainer, exit_code=e.code)
        kept = str(last) if last.exists() else None
        tel.emit(Event.TRAIN_FAILED, exit_code=e.code, step=trainer.global_step, message=e.message,
                 checkpoint=kept)
        e.message += (f" The last checkpoint before the failure is {kept}." if kept else
                      " No checkpoint had been written yet (train.checkpoint_every).")
        raise
    duration = time.time() - t0
    train_peak = meter.safe_read()
    sharded = strategy == "fsdp2" and distributed()
    # FSDP2: the whole weights gathered to rank 0 (a collective) before rank 0 writes them
    saved = _save_outputs(model, tokenizer, spec, run, full_state_dict(model) if sharded else None)
    if not (rank_zero() or sharded):   # DDP: rank 0 evaluates and writes; the others wait
        return share(None)
    after = evaluate(model, prepared.sets, tel, "adapter", spec, refs)   # FSDP2: every rank, in step
    if not rank_zero():
        return share(None)
    log_eval(trainer, after)
    if base_eval is None:   # resumed: the base numbers are in the first run's EVAL rows
        base_eval = base_from_telemetry(run.telemetry_rows(Event.EVAL))
    oracle = held_out_oracle(module.objective, model, prepared.held_out, run, tel)
    trainable, total = params
    steps = next(c for c in trainer.callbacks if isinstance(c, StepTelemetry))
    tokens, secs = steps.trained_tokens, steps.train_seconds
    summary = _summary(spec, plan, prepared.label, base_eval, after, trainer, duration,
                       trainable, total, train_peak, meter.kind)
    # who started the ranks, as Lightning saw it (TorchElasticEnvironment, SLURMEnvironment,
    # LightningEnvironment: mens's own launcher); none for one device
    cluster = getattr(trainer.strategy, "cluster_environment", None)
    # real tokens trained by every rank (summed at each step) per second of this session's
    # steps (from the first step's start: set-up and the ranks' start excluded)
    summary.update(world_size=size, strategy=strategy, train_tokens=tokens,
                   cluster_environment=type(cluster).__name__ if cluster is not None else None,
                   tokens_per_sec=round(tokens / secs, 1) if secs > 0 else None)
    if oracle:
        flags = oracle.pop("flags", None)             # grpo's health flags (its measure only)
        summary[f"held_out_{oracle.pop('split', 'oracle')}"] = oracle
        if flags is not None:
            summary["grpo_flags"] = flags
    if trims:   # what the heap trims cost (mens.train.allocator)
        summary.update(heap_trims=trims.counts["heap_trims"],
                       heap_trim_s=round(trims.counts["heap_trim_s"], 3))
    tel.emit(Event.TRAIN_COMPLETE, **summary)
    log_weights(trainer, saved, spec)
    close_loggers(trainer, summary)
    tel.close()
    run.write_json(RunDir.SUMMARY, summary)
    return share(summary)


def held_out_oracle(objective, model, held: tuple, run: RunDir, tel) -> dict | None:
    """An objective's held-out measure after training beside the base's (grpo: the greedy
    oracle pass rate before → after): the summary's numbers; every answer and its reward in
    held_out_oracle.json. held: the data stage's (name, held-out chats)."""
    from mens.train.evaluate import health_flags, objective_held_out, oracle_from_telemetry

    after = objective_held_out(objective, model, held, tel, "adapter")
    if after is None:
        return None
    if "split" in after:   # a measure of its own (distill): before → after, as it is
        before = getattr(objective, "before", None) or {}
        run.write_json(f"held_out_{after['split']}.json", {"before": before, "after": after},
                       indent=1)
        return {"split": after["split"], "before": before, "after": after}
    before = getattr(objective, "before", None) or oracle_from_telemetry(run.telemetry_rows())
    run.write_json("held_out_oracle.json", {"before": before, "after": after}, indent=1)
    keys = ("n", "passed", "failed", "unverified", "pass_rate", "reward_mean")
    out = {"spoke": after["spoke"], "check": after["check"],
           "before": {k: (before or {}).get(k) for k in keys},
           "after": {k: after.get(k) for k in keys}}
    if before and before.get("reward_mean") is not None and after["reward_mean"] is not None:
        out["reward_gain"] = after["reward_mean"] - before["reward_mean"]
    out["flags"] = health_flags(run.telemetry_rows(Event.TRAIN_STEP), before, after, tel)
    return out



def _index(item) -> int:
    """A pair example's index: (chosen, rejected, index)."""
    return item[2]


def _same_world(run: RunDir, size: int) -> None:
    """A checkpoint holds one loader position per rank's share of the rows (and FSDP2 shards
    of the optimizer): it continues only at the world size that wrote it."""
    rows = [r for r in run.telemetry_rows() if "world_size" in r]
    wrote = rows[-1]["world_size"] if rows else 1   # a run from before multi-device: 1
    if wrote != size:
        raise ConfigError(
            f"{run} was trained by {wrote} process{'es' if wrote > 1 else ''} (world size "
            f"{wrote}) and this resume would run {size}: a checkpoint continues only at the "
            f"world size that wrote it (each rank's share of the rows and its loader position "
            f"are saved per world size). Resume with hw.devices × hw.nodes = {wrote} as the "
            f"run's spec.yaml had it, or start a new run from its spec with `python -m mens "
            f"rerun={run}`.", key="hw.devices")


def _save_outputs(model, tokenizer, spec, run: RunDir, state_dict=None) -> Path:
    """adapter/ (PEFT) or model/ (full), written to a temp dir and renamed into place.
    state_dict: the whole weights when the model is FSDP2-sharded (rank 0's copy)."""
    r = spec.rung
    hub_base = r.init == "pretrained" and not r.path and not r.tokenizer_bundled and r.repo_id

    def save(tmp: Path) -> None:
        if state_dict is None:
            model.save_pretrained(str(tmp), safe_serialization=True)
        else:
            if getattr(model.config, "tie_word_embeddings", False):   # as save_pretrained drops it
                state_dict.pop("lm_head.weight", None)
            model.save_pretrained(str(tmp), safe_serialization=True, state_dict=state_dict)
            _unsharded_name(tmp / "config.json", type(model).__name__)
        if spec.lane.method == "full":
            tokenizer.save_pretrained(str(tmp))
        elif hub_base:   # portable: the base by hub id and commit, not this machine's cache path
            from mens.source.hub import portable_adapter
            portable_adapter(tmp, r.repo_id, r.commit or r.revision)
    return run.save_dir(artifact_name(spec.lane.method), save)


def _unsharded_name(config: Path, name: str) -> None:
    """fully_shard renames the model's class FSDP<Class>, and save_pretrained writes that name
    into config.json's architectures: the saved model is the plain class."""
    import json

    from mens.run.rundir import atomic_write

    cfg = json.loads(config.read_text())
    cfg["architectures"] = [a.removeprefix("FSDP") for a in cfg.get("architectures") or [name]]
    atomic_write(config, json.dumps(cfg, indent=2) + "\n")


def _summary(spec, plan, label: str, base, after, trainer, duration, trainable, total,
             train_peak, peak_kind) -> dict:
    import resource
    # the training window's peak above the pre-model baseline: the quantity the planner
    # predicts and calibration fits, so the two compare; the whole process's too, on CPU
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    process = rss * (1 if sys.platform == "darwin" else 1024)   # bytes on macOS, KiB on Linux
    from mens.config.objectives import lane_fields

    coll = after.get("collateral")
    pairs = {k: after["eval"][k] for k in ("reward_accuracy", "reward_margin")
             if k in after["eval"]}   # held-out preference pairs: DPO loss and rewards
    return {
        "spoke": spec.spoke.name, **lane_fields(spec.lane), "rung": spec.rung.name,
        "data": label,
        "eval_loss_base": base["eval"]["loss"], "eval_loss_adapter": after["eval"]["loss"],
        "eval_improvement_pct": 100 * (1 - after["eval"]["loss"] / base["eval"]["loss"]),
        "eval_records": after["eval"]["records"], "eval_tokens": after["eval"]["tokens"],
        **({"eval_kind": "dpo", **{f"eval_{k}": v for k, v in pairs.items()}} if pairs else {}),
        "collateral": None if coll is None else {
            "spoke": coll["spoke"], "eval_loss_base": base["collateral"]["loss"],
            "eval_loss_adapter": coll["loss"], "records": coll["records"],
            "tokens": coll["tokens"]},
        "steps": trainer.global_step, "epochs": trainer.current_epoch,
        "duration_s": round(duration, 2), "trainable_params": trainable, "total_params": total,
        "predicted_peak_bytes": plan.peak_bytes, "measured_peak_bytes": train_peak,
        "measured_peak_kind": peak_kind, "process_peak_rss_bytes": process,
    }
