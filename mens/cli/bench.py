"""`make bench`: the plan path's start-up time against `python -c "import torch"`; training
throughput and padding waste against a plain transformers Trainer; export memory (0.6b shape);
the memory contract's held-out calibration errors next to two rules of thumb (issue #4).

Commands run interleaved (A B C, A B C, …) so that the shared 2-core box's noise hits each
alike; the figure that counts is the ratio of medians measured side by side in one run.
Goal (issue #2): plan ≤ 0.4 × import torch. A bare Hydra app is shown for reference.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BARE_HYDRA = """
import hydra
@hydra.main(config_path=None, version_base="1.3")
def main(cfg):
    pass
main()
"""


def time_command(cmd: list[str], cwd: str) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if p.returncode not in (0, 3):
        raise SystemExit(f"bench: {' '.join(cmd)} failed ({p.returncode}): {p.stderr[-500:]}")
    return elapsed


def main(runs: int = 7) -> dict:
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "bare.py").write_text(BARE_HYDRA)
        commands = {
            "mens.plan +hw=rtx4090 +rung=8b": [py, "-m", "mens.plan", "+hw=rtx4090", "+rung=8b",
                                               f"hydra.run.dir={tmp}/run"],
            "import torch": [py, "-c", "import torch"],
            "bare hydra app": [py, "bare.py", f"hydra.run.dir={tmp}/bare"],
        }
        for cmd in commands.values():          # warm the page cache once
            time_command(cmd, tmp)
        times: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(runs):
            for name, cmd in commands.items():
                times[name].append(time_command(cmd, tmp))
    med = {k: statistics.median(v) for k, v in times.items()}
    torch_s = med["import torch"]
    print(f"{'command':34} {'median s':>9} {'× import torch':>15}   ({runs} runs each, interleaved)")
    for name, m in med.items():
        print(f"{name:34} {m:9.3f} {m / torch_s:15.2f}")
    ratio = med["mens.plan +hw=rtx4090 +rung=8b"] / torch_s
    verdict = "meets" if ratio <= 0.4 else "misses"
    print(f"plan / import torch = {ratio:.2f} ({verdict} the ≤ 0.40 goal)")
    result = {"runs": runs, "median_s": med, "samples_s": times, "ratio": ratio}
    out = Path("outputs/bench")
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan_speed.json").write_text(json.dumps(result, indent=2))
    return result




def train_throughput(steps: int = 12, seq_len: int = 512, micro: int = 4) -> dict:
    """Real (non-padding) tokens/s of mens's packed LoRA training against a plain transformers
    Trainer + peft on the same tiny model, records, seq_len and batch — one process, one run."""
    import os

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

    from mens.config.compose import compose
    from mens.data.corpus import is_pair, load_spoke
    from mens.model.load import load_tokenizer
    from mens.resources import ASSETS
    from mens.data.pack import pad_batch
    from mens.data.examples import examples_for
    from mens.train.run import train_run
    from mens.plan.spec import compile_run

    torch.set_num_threads(os.cpu_count() or 1)
    overrides = ["+hw=cpu", "logger=none", "curriculum=flat", f"train.seq_len={seq_len}",
                 f"train.micro_batch={micro}", "train.grad_accum=1", f"train.max_steps={steps}",
                 "lane.optimizer.lr=1e-3"]
    with tempfile.TemporaryDirectory() as tmp:
        spec, plan = compile_run(compose(overrides), "train")
        train_run(spec, plan, Path(tmp) / "mens")
        from mens.train.telemetry import read
        rows = [r for r in read(Path(tmp) / "mens" / "telemetry.jsonl") if r["event"] == "TRAIN_STEP"]
        cur = [r for r in read(Path(tmp) / "mens" / "telemetry.jsonl") if r["event"] == "CURRICULUM"]
        mens_tps = statistics.median(r["tokens_per_sec"] for r in rows[1:])   # skip warm-up step
        mens_waste = cur[0]["padding_waste_pct"]

        # baseline: the same records, one per row, padded to the longest in the batch
        tok = load_tokenizer(spec.rung, [])
        records = [r for r in load_spoke(spec.spoke, seed=spec.train.seed)[0] if not is_pair(r)]
        exs = list(examples_for(records, tok, spec, list(spec.curriculum.phases), False)[0].values())
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(str(ASSETS / "tiny"), dtype=torch.float32),
                               LoraConfig(r=16, lora_alpha=32, target_modules=list(spec.lane.lora.targets),
                                          task_type="CAUSAL_LM"))
        counted = {"real": 0, "total": 0}

        def collator(batch):
            return pad_batch(batch, min(seq_len, max(len(e) for e in batch)))

        class Counting(Trainer):   # count at the step itself (accelerate's loader reads ahead)
            def training_step(self, model, inputs, *a, **kw):
                counted["real"] += int(inputs["attention_mask"].sum())
                counted["total"] += inputs["attention_mask"].numel()
                return super().training_step(model, inputs, *a, **kw)

        args = TrainingArguments(output_dir=str(Path(tmp) / "hf"), per_device_train_batch_size=micro,
                                 max_steps=steps, learning_rate=1e-3, logging_steps=1000,
                                 save_strategy="no", report_to=[], use_cpu=True,
                                 dataloader_num_workers=0, remove_unused_columns=False, seed=0)
        marks: list[tuple[float, int]] = []

        class Marks(TrainerCallback):   # (time, real tokens so far) at each optimizer step
            def on_step_end(self, args, state, control, **kw):
                marks.append((time.perf_counter(), counted["real"]))

        trainer = Counting(model=model, args=args, train_dataset=exs, data_collator=collator,
                          callbacks=[Marks()])
        trainer.train()
    # per-step rates from step 2 on, as mens's TRAIN_STEP rows are (its first step is skipped too)
    hf_tps = statistics.median((b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(marks, marks[1:]))
    hf_waste = 100 * (1 - counted["real"] / counted["total"])
    result = {"mens_tokens_per_s": mens_tps, "hf_tokens_per_s": hf_tps,
              "ratio": mens_tps / hf_tps, "mens_padding_waste_pct": mens_waste,
              "hf_padding_waste_pct": hf_waste, "steps": steps, "seq_len": seq_len, "micro_batch": micro}
    print(f"training, real tokens/s: mens {mens_tps:,.0f} vs transformers Trainer {hf_tps:,.0f} "
          f"= {result['ratio']:.2f}x (goal >= 1.3x); padding waste mens {mens_waste:.1f} % "
          f"(goal <= 5 %), Trainer {hf_waste:.1f} %")
    return result


def padding_table(spoke: str = "vox_lang", seq_lens=(512, 1024, None, 2048)) -> list[dict]:
    """Padding waste of mens's packing (three_epoch curriculum, all epochs) against one record
    per row padded to the longest in its micro-batch of 4 (a plain Trainer's collator), per
    seq_len (None: the spoke's auto seq_len). No training: token accounting only."""
    from dataclasses import replace

    from mens.config.compose import compose
    from mens.data.corpus import is_pair, load_spoke
    from mens.model.load import load_tokenizer
    from mens.data.pack import packing_stats
    from mens.data.examples import examples_for
    from mens.plan.spec import compile_run
    from mens.train.module import epoch_items

    out = []
    for sl in seq_lens:
        spec, _ = compile_run(compose(["+hw=cpu", f"spoke={spoke}"] +
                                      ([f"train.seq_len={sl}"] if sl else [])), "train")
        tok = load_tokenizer(spec.rung, [])
        recs = [r for r in load_spoke(spec.spoke, seed=0)[0] if not is_pair(r)]
        exs, _ = examples_for(recs, tok, spec, list(spec.curriculum.phases), False)
        recs = [r for r in recs if r["id"] in exs]
        packed = {"real": 0, "total": 0}
        padded = {"real": 0, "total": 0}
        for e in range(spec.curriculum.epochs):
            st = packing_stats(epoch_items(exs, recs, spec, e, False))
            packed["real"] += st["real_tokens"]
            packed["total"] += st["real_tokens"] + st["padded_tokens"]
            one = epoch_items(exs, recs, replace(spec, train=replace(spec.train, packing=False)),
                              e, False)
            for i in range(0, len(one), 4):
                lens = [min(len(x), spec.train.seq_len) for x in one[i:i + 4]]
                padded["real"] += sum(lens)
                padded["total"] += max(lens) * len(lens)
        out.append({"seq_len": spec.train.seq_len, "auto": sl is None,
                    "mens_waste_pct": 100 * (1 - packed["real"] / packed["total"]),
                    "pad_to_longest_waste_pct": 100 * (1 - padded["real"] / padded["total"])})
    print(f"padding waste on {spoke} (three_epoch): seq_len  mens packing  pad-to-longest x4")
    for r in out:
        print(f"  {r['seq_len']:>5}{' (auto)' if r['auto'] else '       '}  {r['mens_waste_pct']:8.1f} %"
              f"  {r['pad_to_longest_waste_pct']:12.1f} %")
    return out


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    from mens.export.bench import main as export_memory
    from mens.calibrate.report import held_out_table

    print("\nmemory contract on held-out calibration records (calibration/cpu.jsonl):")
    held = held_out_table()     # no training: the committed records against the committed cells
    out = {"plan": main(runs), "train": train_throughput(), "padding": padding_table(),
           "export": export_memory(), "calibration_held_out": held}
    Path("outputs/bench").mkdir(parents=True, exist_ok=True)
    Path("outputs/bench/bench.json").write_text(json.dumps(out, indent=2))
