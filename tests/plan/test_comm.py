"""Planned per node, with communication in the time (#41): the plan of Llama-3.1-8B on 2 nodes ×
8 H100 shows the gradient communication and a speed-up below 2× over one node; LoRA's all-reduce
is the adapter's gradients only, small, and said so; a link the tier does not state is said, not
silently linear."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mens.plan.comm import Link, seconds
from mens.plan.output import communication_lines

LLAMA = Path(__file__).parent / "fixtures" / "configs" / "Llama-3.1-8B.json"
PARAMS = 8_030_261_248


@pytest.fixture
def llama(tmp_path) -> str:
    d = tmp_path / "Llama-3.1-8B"
    d.mkdir()
    shutil.copy(LLAMA, d / "config.json")
    return str(d)


def plan_of(compile_run, llama, nodes, *more):
    return compile_run("+hw=h100", "hw.devices=8", f"hw.nodes={nodes}", "+rung=hf",
                       f"rung.path={llama}", *more)


# the same per-device shape on both: micro 2, so 1 node accumulates twice where 2 nodes do not
SHAPE = ("train.micro_batch=2", "train.global_batch=32", "train.seq_len=2048",
         "lane.gradient_checkpointing=true")


def test_full_fine_tuning_on_two_nodes_is_less_than_twice_one(compile_run, llama):
    _, one = plan_of(compile_run, llama, 1, "lane=full", *SHAPE)
    spec, two = plan_of(compile_run, llama, 2, "lane=full", *SHAPE)
    assert one.fits and two.fits and two.strategy == one.strategy == "fsdp2"
    assert two.params_total == PARAMS and two.shape == one.shape
    c = two.communication
    assert c["nodes"] == 2 and c["devices"] == 8 and c["world"] == 16
    # FSDP2: the fp32 parameters gathered twice and the gradients reduce-scattered, each step
    assert [(o["op"], o["bytes"], o["per_micro_step"]) for o in c["ops"]] == [
        ("all-gather", PARAMS * 4, 2), ("reduce-scatter", PARAMS * 4, 1)]
    # across nodes the ring runs at the slower hop: the node's 8 × 400 Gb/s (400 GB/s) < NVLink
    assert c["bus_gbs"] == pytest.approx(400 * 0.8)
    assert one.communication["bus_gbs"] == pytest.approx(450 * 0.8)
    assert c["s_per_micro_step"] == pytest.approx(3 * 15 / 16 * PARAMS * 4 / 320e9, rel=1e-4)
    assert c["s_per_micro_step"] > one.communication["s_per_micro_step"] > 0
    # the term is in the time: below 2× one node, on the plan's own figure and on tokens/s
    assert 1.0 < c["speedup_vs_one_node"] < 2.0
    ratio = two.speed["tokens_per_s"] / one.speed["tokens_per_s"]
    assert ratio == pytest.approx(c["speedup_vs_one_node"], rel=1e-3) and ratio < 2.0
    assert c["speedup_vs_one_device"] < c["speedup_if_overlapped"] <= 16
    assert two.cost["parts"]["communication"]["s"] == pytest.approx(c["s_per_micro_step"])
    text = "\n".join(communication_lines(two))
    assert "fsdp2 over 2 nodes × 8 devices" in text and "all-gather" in text
    assert "reduce-scatter" in text and "vs one node (8 devices)" in text and "ASSUMED" in text


def test_loras_all_reduce_is_the_adapter_only_and_said_small(compile_run, llama):
    _, full = plan_of(compile_run, llama, 2, "lane=full", *SHAPE)
    _, lora = plan_of(compile_run, llama, 2, "lane=lora", *SHAPE)
    c = lora.communication
    assert lora.strategy == "ddp" and [o["op"] for o in c["ops"]] == ["all-reduce"]
    assert c["ops"][0]["bytes"] == lora.params_trainable * 4 < PARAMS * 4 / 100
    # once per optimizer step: micro 2 × 16 devices = 32 = the global batch, so every step
    assert c["ops"][0]["per_micro_step"] == 1
    assert c["share"] < 0.05 < full.communication["share"]
    assert c["speedup_vs_one_node"] > full.communication["speedup_vs_one_node"]
    text = "\n".join(communication_lines(lora))
    assert "small: LoRA's all-reduce moves the adapter's gradients only" in text


def test_accumulation_skips_ddps_sync_but_not_fsdp2s(compile_run, llama):
    _, lora = plan_of(compile_run, llama, 1, "lane=lora", "train.micro_batch=1",
                      "train.grad_accum=4")
    assert lora.grad_accum == 4 and lora.communication["ops"][0]["per_micro_step"] == 0.25
    _, full = plan_of(compile_run, llama, 1, "lane=full", "train.micro_batch=1",
                      "train.grad_accum=4")
    assert [o["per_micro_step"] for o in full.communication["ops"]] == [2, 1]


def test_ring_times_follow_nccl_tests_bus_bandwidth():
    """nccl-tests doc/PERFORMANCE.md: all-reduce 2(n−1)/n · S / B, all-gather (n−1)/n · S / B."""
    ar = [{"op": "all-reduce", "bytes": 1e9, "per_micro_step": 1}]
    ag = [{"op": "all-gather", "bytes": 1e9, "per_micro_step": 1}]
    assert seconds(ar, 8, 100) == pytest.approx(2 * 7 / 8 * 1e9 / 100e9)
    assert seconds(ag, 8, 100) == pytest.approx(7 / 8 * 1e9 / 100e9)
    assert seconds(ar, 2, 100) == pytest.approx(1e9 / 100e9)
    link = Link("NVLink", 450, "IB", 400, 0.8)
    assert link.bus(1)[0] == pytest.approx(360) and link.bus(2)[0] == pytest.approx(320)
    assert Link("PCIe", 31.5, "10GbE", 1.25).bus(2)[0] == pytest.approx(1.0)
    assert Link().bus(1)[0] is None and Link("x", 10).bus(2)[0] is None


def test_an_unknown_link_is_said_not_silently_linear(compile_run, llama, tmp_path):
    _, p = plan_of(compile_run, llama, 2, "lane=full", "hw.link.inter_gbs=null", *SHAPE)
    c = p.communication
    assert c["s_per_micro_step"] is None and "inter_gbs" in c["bus_how"]
    assert "communication" not in p.cost["parts"] and "speedup_vs_one_node" not in c
    assert any("NOT in the time" in line for line in communication_lines(p))
    json.dumps(p.to_dict())   # plan.json holds it


def test_one_device_has_no_communication(compile_run, llama):
    _, p = compile_run("+hw=h100", "hw.devices=1", "+rung=hf", f"rung.path={llama}",
                       "lane=lora")
    assert p.communication is None and "communication" not in p.cost["parts"]
