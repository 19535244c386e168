"""The training peers `make bench` measures mens against, each in its own process so no heap or
thread state leaks between them (`python tools/bench/peers.py PEER JSON` prints one JSON line):

    mens     mens's own run (train_run) on its default paths — what the memory cells were fitted
             on: per-record attention, the chunked loss; `heap` as asked
    mens_classic  mens on the paths before issue #13 (4-D mask, full logits), `heap` as asked:
             what the lean paths gained
    trainer  a plain transformers Trainer + peft, one record per row padded to the longest in the
             batch (the memory shape: records concatenated into rows of seq_len, as `group_texts`)
    trl      TRL's SFTTrainer with packing (best-fit decreasing, padding-free)

Same model, records (the spoke's training records through mens's own tokenization and labels),
seq_len, micro-batch, LoRA targets and steps; the same C heap settings as mens
(mens.train.allocator: the mmap threshold, and a trim before every step), so a ratio measures
the method. Measured: real (non-padding) tokens/s,
the median of per-step rates after the first step; and the peak as the planner counts it — the
training window above what was resident before the model loaded (mens.train.meter).
"""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

LR = 1e-3


def _setup(args: dict):
    import os

    import torch

    from mens.config.compose import compose
    from mens.data.corpus import is_pair
    from mens.data.examples import examples_for
    from mens.data.select import train_records
    from mens.model.load import load_tokenizer
    from mens.plan.spec import compile_run
    from mens.train import allocator

    torch.set_num_threads(os.cpu_count() or 1)
    spec, plan = compile_run(compose(overrides(args)), "train")
    if spec.train.heap == "fixed":   # the peers train under the heap mens trains under
        allocator.configure("cpu")
    tok = load_tokenizer(spec.rung, [])
    records = [r for r in train_records(spec)[0] if not is_pair(r)]
    exs = list(examples_for(records, tok, spec, list(spec.curriculum.phases), False)[0].values())
    return spec, plan, tok, exs


def overrides(args: dict) -> list[str]:
    rung = args.get("rung", "tiny")
    out = ["+hw=cpu", "logger=none", "curriculum=flat", f"+rung={rung}",
           f"train.seq_len={args['seq_len']}", f"train.micro_batch={args['micro']}",
           "train.grad_accum=1", f"train.max_steps={args['steps']}", f"lane.optimizer.lr={LR}",
           f"lane.gradient_checkpointing={str(args.get('ckpt', False)).lower()}",
           "train.eval_max_records=1", "plan.force=true"]
    out += ["train.attention=block_mask", "train.loss=full_logits"] if args.get("classic") else []
    out += [f"train.heap={args.get('heap', 'auto')}"]
    return out + (["rung.init=random"] if rung != "tiny" else [])


def _rates(marks: list[tuple[float, int]]) -> float:
    return statistics.median((b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(marks, marks[1:]))


def run_mens(args: dict) -> dict:
    from mens.run.rundir import RunDir
    from mens.run.telemetry import Event
    from mens.train.run import train_run

    spec, plan, _, _ = _setup(args)
    with tempfile.TemporaryDirectory() as tmp:
        summary = train_run(spec, plan, Path(tmp))
        rows = RunDir(tmp).telemetry_rows(Event.TRAIN_STEP)
    return {"tokens_per_s": statistics.median(r["tokens_per_sec"] for r in rows[1:]),
            "peak_bytes": summary["measured_peak_bytes"], "seq_len": spec.train.seq_len}


def _lora(model, spec):
    from peft import LoraConfig, get_peft_model

    lora = spec.lane.lora
    return get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha,
                                            target_modules=list(lora.targets),
                                            task_type="CAUSAL_LM"))


def _base(spec):
    import torch

    from mens.model.load import load_base
    return load_base(spec.rung, "lora", "fp32", "cpu", 0).to(torch.float32)


def _marks(meter, counted: dict, marks: list, spec):
    """A callback: opens the memory window at the first step; (time, real tokens) per step.
    Under train.heap=fixed it trims the heap before every step, as mens does (allocator)."""
    from transformers import TrainerCallback

    from mens.train import allocator
    trim = spec.train.heap == "fixed"

    class Marks(TrainerCallback):
        def on_step_begin(self, *a, **kw):
            if trim:
                allocator.trim()
            if not marks:
                meter.start()

        def on_step_end(self, *a, **kw):
            marks.append((time.perf_counter(), counted["real"]))
    return Marks()


def run_trainer(args: dict) -> dict:
    from transformers import Trainer, TrainingArguments

    from mens.data.pack import pad_batch
    from mens.train.meter import meter_for

    spec, _, _, exs = _setup(args)
    seq, ckpt = spec.train.seq_len, bool(args.get("ckpt"))
    meter = meter_for("cpu")
    meter.baseline()
    model = _lora(_base(spec), spec)
    if args.get("grouped"):   # records concatenated into full rows of seq_len (group_texts)
        flat = [(t, lab) for e in exs for t, lab in zip(e.input_ids, e.labels)]
        rows = [flat[i:i + seq] for i in range(0, len(flat) - seq + 1, seq)]
        from mens.data.pack import Example
        exs = [Example([t for t, _ in r], [lab for _, lab in r]) for r in rows]
    counted = {"real": 0}
    marks: list[tuple[float, int]] = []

    class Counting(Trainer):   # count at the step itself (accelerate's loader reads ahead)
        def training_step(self, model, inputs, *a, **kw):
            counted["real"] += int(inputs["attention_mask"].sum())
            return super().training_step(model, inputs, *a, **kw)


    with tempfile.TemporaryDirectory() as tmp:
        targs = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=spec.train.micro_batch,
            max_steps=spec.train.max_steps, learning_rate=LR, logging_steps=10_000,
            save_strategy="no", report_to=[], use_cpu=True, dataloader_num_workers=0,
            remove_unused_columns=False, seed=0, gradient_checkpointing=ckpt,
            gradient_checkpointing_kwargs={"use_reentrant": False})
        Counting(model=model, args=targs, train_dataset=exs,
                 callbacks=[_marks(meter, counted, marks, spec)],
                 data_collator=lambda b: pad_batch(b, min(seq, max(len(e) for e in b)))).train()
    return {"tokens_per_s": _rates(marks), "peak_bytes": meter.safe_read(), "seq_len": seq}


def run_trl(args: dict) -> dict:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from mens.data.pack import IGNORE
    from mens.train.meter import meter_for

    spec, _, tok, exs = _setup(args)
    seq, ckpt = spec.train.seq_len, bool(args.get("ckpt"))
    meter = meter_for("cpu")
    meter.baseline()
    model = _lora(_base(spec), spec)
    data = Dataset.from_list([{"input_ids": e.input_ids[:seq],
                               "completion_mask": [int(x != IGNORE) for x in e.labels[:seq]]}
                              for e in exs])
    counted = {"real": 0}
    marks: list[tuple[float, int]] = []

    class Counting(SFTTrainer):
        def training_step(self, model, inputs, *a, **kw):
            counted["real"] += int(inputs["input_ids"].numel())   # padding-free: every slot real
            return super().training_step(model, inputs, *a, **kw)


    with tempfile.TemporaryDirectory() as tmp:
        cfg = SFTConfig(output_dir=tmp, per_device_train_batch_size=spec.train.micro_batch,
                        max_steps=spec.train.max_steps, learning_rate=LR, logging_steps=10_000,
                        save_strategy="no", report_to=[], use_cpu=True, seed=0,
                        max_length=seq, packing=True, packing_strategy="bfd", padding_free=True,
                        completion_only_loss=True, gradient_checkpointing=ckpt,
                        gradient_checkpointing_kwargs={"use_reentrant": False},
                        dataloader_num_workers=0)
        Counting(model=model, args=cfg, train_dataset=data, processing_class=tok,
                 callbacks=[_marks(meter, counted, marks, spec)]).train()
    return {"tokens_per_s": _rates(marks), "peak_bytes": meter.safe_read(), "seq_len": seq}


PEERS = {"mens": run_mens, "mens_classic": lambda a: run_mens({**a, "classic": True}),
         "trainer": run_trainer, "trl": run_trl}


def measure(peer: str, args: dict, timeout: float = 3600) -> dict:
    """One peer in a fresh process; its JSON result (or {"error": …})."""
    import subprocess

    p = subprocess.run([sys.executable, __file__, peer, json.dumps(args)],
                       capture_output=True, text=True, timeout=timeout)
    last = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode or not last:
        return {"error": (p.stderr or p.stdout)[-800:]}
    return json.loads(last[-1])


if __name__ == "__main__":
    print(json.dumps(PEERS[sys.argv[1]](json.loads(sys.argv[2]))))
