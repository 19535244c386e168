"""Run stage: from a RunSpec + Plan to a finished run directory.

telemetry.jsonl (TRAIN_START … TRAIN_COMPLETE), checkpoints/, adapter/ (PEFT layout) or model/
(full lane), summary.json (eval loss of base vs adapter on the spoke's held-out split and on one
other spoke's). summary.json is written last and atomically: a run dir without it is unfinished.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from mens.cli import atomic_write
from mens.errors import MensError
from mens.telemetry import Telemetry, git_commit, host

class Interrupted(MensError):
    code = 130


def collateral_spoke(name: str) -> str:
    from mens.spec import _spokes
    names = _spokes()
    return names[(names.index(name) + 1) % len(names)]


def examples_for(records, tokenizer, spec, phases, pairs: bool, max_len: int | None = None):
    from mens.pack import IGNORE, Example, tokenize_chat

    out, stats = {}, {"unsupervised_records_skipped": 0}
    max_len = max_len or spec.train.seq_len

    def supervised(*labels) -> bool:   # the window cut off every answer token: nothing to learn
        if all(any(x != IGNORE for x in lab[1:]) for lab in labels):
            return True
        stats["unsupervised_records_skipped"] += 1
        return False

    for r in records:
        phase = phases.index(r["phase"])
        if pairs:
            c_ids, c_lab = tokenize_chat(tokenizer, r["prompt"] + r["chosen"], max_len, stats)
            r_ids, r_lab = tokenize_chat(tokenizer, r["prompt"] + r["rejected"], max_len, stats)
            if supervised(c_lab, r_lab):
                out[r["id"]] = (Example(c_ids, c_lab, phase, r["id"]),
                                Example(r_ids, r_lab, phase, r["id"]), len(out))   # + pair index
        else:
            ids, labels = tokenize_chat(tokenizer, r["messages"], max_len, stats)
            if supervised(labels):
                out[r["id"]] = Example(ids, labels, phase, r["id"])
    return out, stats


def eval_loss(model, examples, micro: int, seq_len: int) -> dict:
    """Token-weighted mean NLL over supervised tokens (one record per row, no packing)."""
    import torch
    from mens.pack import IGNORE, pad_batch

    from mens.model import eval_mode

    device = next(model.parameters()).device
    total, count = 0.0, 0
    # longest first, so each batch pads to lengths alike (unsorted: ~40 % of slots were padding)
    examples = sorted(examples, key=len, reverse=True)
    eval_mode(model)
    with torch.no_grad():
        for i in range(0, len(examples), micro):
            chunk = examples[i:i + micro]
            batch = pad_batch(chunk, min(seq_len, max(len(e) for e in chunk)))
            batch = {k: v.to(device) for k, v in batch.items()}
            labels = batch.pop("labels")
            logits = model(**batch).logits[:, :-1].float()                   # (B, S-1, V)
            target = labels[:, 1:]                                           # (B, S-1)
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                ignore_index=IGNORE, reduction="sum")
            total += loss.item()
            count += int((target != IGNORE).sum())
    model.train()
    return {"loss": total / max(count, 1), "tokens": count, "records": len(examples)}


def _eval_sets(spec, tokenizer):
    """{name: [Example]} for the spoke's held-out split and one other spoke's (collateral)."""
    from mens.corpus import load_eval
    from mens.spec import load_option

    out = {}
    for role, name in (("eval", spec.spoke.name), ("collateral", collateral_spoke(spec.spoke.name))):
        spoke = spec.spoke if role == "eval" else load_option("spoke", name)
        recs = [r for r in load_eval(spoke) if "messages" in r][:spec.train.eval_max_records]
        phases = list(spec.curriculum.phases)
        # held-out records are scored whole (up to the rung's positions, at most 4096), not cut
        # to the training window: a cut could drop the very answer being scored
        exs, _ = examples_for(recs, tokenizer, spec, phases, pairs=False,
                              max_len=min(spec.rung.max_position_embeddings, 4096))
        out[role] = (name, list(exs.values()))
    return out


def _evaluate(model, sets, spec, tel, which: str) -> dict:
    res = {}
    for role, (name, exs) in sets.items():
        r = eval_loss(model, exs, 4, max(len(e) for e in exs))
        tel.emit("EVAL", model=which, split=role, spoke=name, **r)
        res[role] = {"spoke": name, **r}
    return res


def train_run(spec, plan, out_dir: Path, resume: bool = False) -> dict:
    import lightning as L
    import torch

    from mens.corpus import is_pair, load_spoke
    from mens.curriculum import epoch_counts
    from mens.model import apply_lane, load_base, load_tokenizer, trainable_count
    from mens.pack import mask_dtype_for, packing_stats
    from mens.train import MensData, MensModule, reference_logps
    from mens.trainer import build_trainer, close_loggers, quiet_libraries

    quiet_libraries()
    out_dir = Path(out_dir)
    tel = Telemetry(out_dir / "telemetry.jsonl")
    notes = list(spec.notes)
    if not resume:
        tel.emit("TRAIN_START", spec=spec.to_dict(), plan=plan.to_dict(), git=git_commit(),
                 versions=spec.versions, host=host(), argv=sys.argv)
    else:
        tel.emit("RESUME", checkpoint=str(out_dir / "checkpoints" / "last.ckpt"))
    for n in notes:
        if n.startswith("GPU_FALLBACK"):
            print(f"mens: {n}", file=sys.stderr)
            tel.emit("GPU_FALLBACK", detail=n)
    L.seed_everything(spec.train.seed, workers=True, verbose=False)
    torch.use_deterministic_algorithms(spec.hw.backend == "cpu", warn_only=True)

    tokenizer = load_tokenizer(spec, notes)
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
        from mens.corpus import DataError
        raise DataError(f"no {spec.spoke.name} record keeps an answer token within "
                        f"train.seq_len={spec.train.seq_len}: raise train.seq_len (or leave it "
                        f"auto).", key="train.seq_len")
    records = [r for r in records if r["id"] in examples]
    sets = _eval_sets(spec, tokenizer)

    from mens.meter import meter_for
    meter = meter_for(spec.hw.backend)     # the peak as calibration measures it (mens/meter.py)
    meter.baseline()                       # what is resident before the model loads
    base = load_base(spec)
    model = apply_lane(base, spec, spec.train.init_adapter)
    trainable, total = trainable_count(model)
    mask_dtype = mask_dtype_for(model.config)
    data = MensData(spec, examples, records, pairs, mask_dtype)
    counts = epoch_counts(records, list(spec.curriculum.caps), phases)
    for e, c in enumerate(counts):
        extra = {} if pairs or not spec.train.packing else packing_stats(data.epochs[e])
        tel.emit("CURRICULUM", epoch=e, cap=spec.curriculum.caps[min(e, len(spec.curriculum.caps) - 1)],
                 **c, **extra)
    base_eval = _peft_base_eval(model, sets, spec, tel) if not resume else None
    ref = None
    if pairs:
        ref = reference_logps(model, list(examples.values()), spec)
    module = MensModule(model, spec, data.position, data.planned_steps(), ref)
    trainer, ckpt = build_trainer(spec, plan, out_dir, tel, data, trainable)
    last = out_dir / "checkpoints" / "last.ckpt"
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
                              f"`python -m mens resume={out_dir}`.") from None
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
    _save_outputs(model, tokenizer, spec, out_dir)
    after = _evaluate(model, sets, spec, tel, "adapter")
    if base_eval is None:   # resumed: the base numbers are in the first run's EVAL rows
        base_eval = _base_from_telemetry(out_dir)
    summary = _summary(spec, plan, base_eval, after, trainer, duration, trainable, total,
                       train_peak, meter.kind)
    tel.emit("TRAIN_COMPLETE", **summary)
    close_loggers(trainer, summary)
    tel.close()
    atomic_write(out_dir / "summary.json", json.dumps(summary, indent=2))
    return summary


def _peft_base_eval(model, sets, spec, tel) -> dict:
    if hasattr(model, "disable_adapter") and spec.lane.kind != "full":
        with model.disable_adapter():
            return _evaluate(model, sets, spec, tel, "base")
    return _evaluate(model, sets, spec, tel, "base")   # full lane: before any step


def _base_from_telemetry(out_dir: Path) -> dict:
    from mens.telemetry import read
    rows = [r for r in read(out_dir / "telemetry.jsonl") if r["event"] == "EVAL" and r["model"] == "base"]
    return {r["split"]: {k: r[k] for k in ("spoke", "loss", "tokens", "records")} for r in rows}


def _save_outputs(model, tokenizer, spec, out_dir: Path) -> None:
    """adapter/ (PEFT) or model/ (full), written to a temp dir and renamed into place."""
    name = "model" if spec.lane.kind == "full" else "adapter"
    tmp, final = out_dir / f".{name}.tmp", out_dir / name
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    if name == "model":
        tokenizer.save_pretrained(str(tmp))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)


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
