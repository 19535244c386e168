"""docs/stages/plan.md's communication example is what `mens plan +rung=8b` says (issue #49 item
11): the model it names is the 8b rung's (Qwen3-8B, not Llama-3.1-8B, whose numbers it once
quoted) and its seconds, speed-up and LoRA bytes are that rung's plan's, rounded as printed."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SHAPE = ("+hw=h100", "+rung=8b", "hw.devices=8", "train.micro_batch=2", "train.global_batch=32",
         "train.seq_len=2048", "lane.gradient_checkpointing=true")


def test_the_8b_communication_example_is_the_8b_rungs_plan(compile_run):
    text = " ".join((ROOT / "docs" / "stages" / "plan.md").read_text().split())
    m = re.search(r"over one node: (\S+) \(`\+rung=8b`\) full \(FSDP2\) at micro-batch 2 × 2,048 "
                  r"tokens takes ~([\d.]+) s of communication per micro-step on 8 H100s \(NVLink\) "
                  r"and ~([\d.]+) s on 2 × 8 .*? a speed-up of ~([\d.]+)× for twice the GPUs; "
                  r"LoRA all-reduces only its adapter \(([\d.]+) GB for the 8B at r 16\)", text)
    assert m, "plan.md's communication example: not found in its expected words"
    model, one_s, two_s, speedup, lora_gb = m.groups()
    rung = yaml.safe_load((ROOT / "conf" / "rung" / "8b.yaml").read_text())
    assert model == rung["repo_id"].split("/")[-1]
    _, one = compile_run(*SHAPE, "lane=full", "hw.nodes=1")
    _, two = compile_run(*SHAPE, "lane=full", "hw.nodes=2")
    _, lora = compile_run(*SHAPE, "lane=lora", "hw.nodes=1")
    assert f"{one.communication['s_per_micro_step']:.2f}" == one_s
    assert f"{two.communication['s_per_micro_step']:.2f}" == two_s
    assert f"{two.communication['speedup_vs_one_node']:.1f}" == speedup
    assert f"{lora.communication['ops'][0]['bytes'] / 1e9:.3f}" == lora_gb   # fp32 grads
