"""Real tiny trainings on CPU: lanes, telemetry, determinism, resume, outputs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from train_util import FAST_TRAIN
from mens.run.telemetry import read

FAST = FAST_TRAIN


def run(compile_run, out: Path, *overrides, resume=False):
    from mens.train.run import train_run
    spec, plan = compile_run(*FAST, *overrides, purpose="train")
    return spec, train_run(spec, plan, out, resume=resume)


def losses(out: Path) -> list[float]:
    return [r["loss"] for r in read(out / "telemetry.jsonl") if r["event"] == "TRAIN_STEP"]


def test_lora_run_leaves_a_complete_run_dir(compile_run, tmp_path):
    spec, summary = run(compile_run, tmp_path, "train.max_steps=6", "train.checkpoint_every=3")
    rows = read(tmp_path / "telemetry.jsonl")
    events = [r["event"] for r in rows]
    assert events[0] == "TRAIN_START" and events[-1] == "TRAIN_COMPLETE"
    start = rows[0]
    assert start["spec"]["rung"]["name"] == "tiny" and start["git"]["commit"]
    assert start["versions"]["torch"] and start["host"]["cpus"]
    steps = [r for r in rows if r["event"] == "TRAIN_STEP"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6]
    for key in ("loss", "learning_rate", "tokens_per_sec", "valid_tokens", "supervised_ratio_pct",
                "planned_steps_total", "eta_seconds_remaining", "progress_fraction",
                "steps_per_sec_ema", "peak_mem_mb", "cpu_util_pct", "sys_ram_used_mb",
                "grad_norm", "real_tokens", "padding_pct", "planned_peak_mb"):
        assert steps[-1][key] is not None, key
    assert steps[-1]["gpu_util_pct"] is None and steps[-1]["gpu_vram_used_mb"] is None  # no GPU
    # the training window's reading each step: what the plan's peak predicts (like for like)
    window = [s["window_peak_mb"] for s in steps]
    assert all(w is not None and w > 0 for w in window)
    # a high-water mark: it only grows — but VmHWM reads max(stored mark, current RSS), and the
    # kernel can reclaim file-backed pages (mapped libraries, weights) without updating the
    # mark, so under memory pressure a later reading can sit ~0.1 MB lower (seen: 210.4 → 210.3)
    assert all(b >= a - 1.0 for a, b in zip(window, window[1:])), window
    assert window[-1] >= window[0]
    assert window[-1] <= steps[-1]["peak_mem_mb"]
    assert {"CHECKPOINT", "EVAL", "CURRICULUM", "DATA"} <= set(events)
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    from mens.resources import ASSETS
    base = AutoModelForCausalLM.from_pretrained(str(ASSETS / "tiny"))
    PeftModel.from_pretrained(base, str(tmp_path / "adapter"))
    saved = json.loads((tmp_path / "summary.json").read_text())
    for key in ("eval_loss_base", "eval_loss_adapter", "eval_records", "eval_tokens"):
        assert saved[key]
    assert saved["collateral"]["spoke"] != "vox_lang" and saved["collateral"]["eval_loss_base"]


def test_same_spec_same_loss_curve(compile_run, tmp_path):
    run(compile_run, tmp_path / "a", "train.max_steps=4")
    run(compile_run, tmp_path / "b", "train.max_steps=4")
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    assert len(losses(tmp_path / "a")) == 4


# each method × objective (sft and dpo on lora, qlora, full) trains in tests/objective/test_lanes.py


def cli(*args, cwd):
    return subprocess.Popen([sys.executable, "-m", "mens", *FAST, *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def adapter_tensors(path: Path):
    from safetensors.torch import load_file
    return load_file(str(path / "adapter" / "adapter_model.safetensors"))


@pytest.mark.slow   # in `make test-slow` (CI runs it): keeps `make test` near 20 min
def test_sigkill_then_resume_ends_with_the_same_adapter(tmp_path):
    steps = ["train.max_steps=8", "train.checkpoint_every=3"]
    whole = cli(*steps, f"hydra.run.dir={tmp_path}/whole", cwd=tmp_path)
    assert whole.wait(timeout=600) == 0, whole.stderr.read()
    killed = cli(*steps, f"hydra.run.dir={tmp_path}/killed", cwd=tmp_path)
    tel = tmp_path / "killed" / "telemetry.jsonl"
    deadline = time.time() + 600
    while time.time() < deadline:   # kill after the step-3 checkpoint, before the next one
        rows = read(tel) if tel.exists() else []
        if any(r["event"] == "TRAIN_STEP" and r["step"] >= 4 for r in rows):
            break
        time.sleep(0.2)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert not (tmp_path / "killed" / "summary.json").exists()     # not a finished run
    assert (tmp_path / "killed" / "checkpoints" / "last.ckpt").exists()
    resumed = subprocess.run([sys.executable, "-m", "mens", f"resume={tmp_path}/killed"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    a, b = adapter_tensors(tmp_path / "whole"), adapter_tensors(tmp_path / "killed")
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] - b[k]).abs().max().item() <= 1e-6, k
    assert any(r["event"] == "RESUME" for r in read(tel))


@pytest.mark.slow   # in `make test-slow` (CI runs it): keeps `make test` near 20 min
def test_first_telemetry_row_alone_relaunches_the_run(tmp_path):
    first = cli("train.max_steps=4", f"hydra.run.dir={tmp_path}/orig", cwd=tmp_path)
    assert first.wait(timeout=600) == 0, first.stderr.read()
    lone = tmp_path / "lone"
    lone.mkdir()
    row = (tmp_path / "orig" / "telemetry.jsonl").read_text().splitlines()[0]
    (lone / "telemetry.jsonl").write_text(row + "\n")
    again = subprocess.run([sys.executable, "-m", "mens", f"rerun={lone}",
                            f"hydra.run.dir={tmp_path}/again"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert losses(tmp_path / "again") == losses(tmp_path / "orig")


def _qlora_grads(compile_run):
    """grads(evaluate) -> {name: grad} of one QLoRA backward on a fresh tiny model, after
    `evaluate(model)` and a no-grad forward (the eval pass a run makes before or during training)."""
    import torch

    from mens.data.examples import examples_for
    from mens.data.pack import pad_batch
    from mens.model.load import load_model, load_tokenizer

    spec, _ = compile_run(*FAST, "lane=qlora", "train.seq_len=128", purpose="train")
    tok = load_tokenizer(spec.rung, [])
    rec = {"id": "x", "phase": "warmup", "messages": [
        {"role": "user", "content": "Write a Vox function that adds two numbers."},
        {"role": "assistant", "content": "fn add(a: int, b: int) -> int { return a + b }"}]}
    exs, _ = examples_for([rec], tok, spec, ["warmup"], pairs=False)
    batch = pad_batch(list(exs.values()), 128)
    batch.pop("real_tokens", None)

    def grads(evaluate):
        model = load_model(spec, tokenizer=tok)[0]
        evaluate(model)
        with torch.no_grad():
            model(**{k: v for k, v in batch.items() if k != "labels"})
        model.train()
        model(**batch).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return grads


def test_qlora_gradients_survive_an_eval_pass(compile_run):
    """bitsandbytes repacks 4-bit weights for a backward-less CPU kernel on the first eval-mode
    forward (on CPUs with AVX512-BF16); mens's eval_mode must leave QLoRA's gradients exactly
    what they were, on every CPU."""
    import torch

    from mens.model.load import eval_mode

    grads = _qlora_grads(compile_run)
    # the reference: the same no-grad forward first, with every module left in train mode (a
    # first no-grad call itself shifts these grads by ~0.4 % vs none at all: bnb state, not mens)
    ref, after_eval = grads(lambda m: m.train()), grads(eval_mode)
    assert ref.keys() == after_eval.keys() and ref
    assert all(torch.equal(ref[k], after_eval[k]) for k in ref)


def test_plain_eval_breaks_qlora_gradients_where_bitsandbytes_repacks(compile_run):
    """The control for the test above: plain model.eval() does break the 4-bit backward, so the
    hazard eval_mode avoids is real. bitsandbytes only repacks where it detects AVX512-BF16."""
    from bitsandbytes.nn.modules import has_avx512bf16

    if not has_avx512bf16():
        pytest.skip("this CPU lacks AVX512-BF16: bitsandbytes never repacks 4-bit weights here, "
                    "so plain eval() is harmless on it and there is no hazard to show")
    grads = _qlora_grads(compile_run)
    ref, after_plain = grads(lambda m: m.train()), grads(lambda m: m.eval())
    b0 = next(k for k in ref if "layers.0." in k and "lora_B" in k)
    rel = ((ref[b0] - after_plain[b0]).norm() / ref[b0].norm()).item()
    assert rel > 0.5, f"control: plain eval() should break the 4-bit backward (rel {rel:.3g})"
