"""Several devices: the plan is per device, the strategy is chosen and said, the global batch is
micro × accum × world, and a refusal's ways out include more devices of the same tier."""
from __future__ import annotations

from dataclasses import replace

import pytest

from mens.errors import ConfigError
from mens.plan.memory import Arch, LaneModel, Shape, components, load_contract


def test_full_lane_shards_when_a_replica_does_not_fit(compile_run):
    spec, plan = compile_run("+hw=h100", "+rung=8b", "lane=full", "hw.devices=8")
    assert plan.fits and plan.strategy == "fsdp2" and plan.world_size == 8
    assert spec.hw.strategy == "fsdp2" and spec.hw.devices == 8
    assert any("strategy fsdp2: a full replica needs" in n for n in spec.notes)
    assert plan.cell == "cuda/full/nockpt/bf16/fsdp2" and not plan.calibrated
    assert spec.train.global_batch == spec.train.micro_batch * spec.train.grad_accum * 8
    one, p1 = compile_run("+hw=h100", "+rung=8b", "lane=full", "hw.devices=1", "plan.force=true")
    assert not p1.fits and p1.peak_bytes > 3 * plan.peak_bytes   # one replica: far beyond


def test_lora_replicates_and_a_replica_that_fits_is_kept(compile_run):
    spec, plan = compile_run("+hw=h100", "+rung=0.6b", "lane=lora", "hw.devices=4")
    assert plan.strategy == "ddp" and "frozen base" in plan.strategy_why
    assert plan.components["communication"] == plan.components["gradients"]   # DDP buckets
    _, full = compile_run("+hw=h100", "+rung=0.6b", "lane=full", "hw.devices=2")
    assert full.strategy == "ddp" and "fits each of 2" in full.strategy_why


def test_sharded_state_is_a_world_size_share():
    c = load_contract()
    arch, lane = Arch(1024, 3072, 28, 16, 8, 128, 151936, True), LaneModel("full", "bf16")
    shape = Shape(1024, 1, True, True)
    one = components(arch, lane, shape, "cuda", c)
    four = components(arch, lane, shape, "cuda", c, world=4, strategy="fsdp2")
    for k in ("trainable", "gradients"):
        assert four[k] == pytest.approx(one[k] / 4, rel=1e-6)
    assert four["activations"] == one["activations"]          # activations are per device
    assert four["communication"] > 0 and "communication" not in one


def test_global_batch_must_divide_over_the_devices(compile_run):
    with pytest.raises(ConfigError, match="does not divide over 2 devices") as e:
        compile_run("+hw=h100", "+rung=0.6b", "hw.devices=2", "train.global_batch=5")
    assert e.value.key == "train.global_batch"
    with pytest.raises(ConfigError, match="over 2 devices is 2 per device, not a multiple of "
                                          "train.micro_batch=4"):
        compile_run("+hw=h100", "+rung=0.6b", "hw.devices=2", "train.micro_batch=4",
                    "train.global_batch=4")
    with pytest.raises(ConfigError, match="× 2 devices = 8"):
        compile_run("+hw=h100", "+rung=0.6b", "hw.devices=2", "train.micro_batch=2",
                    "train.grad_accum=2", "train.global_batch=6")


@pytest.mark.parametrize("args, key", [
    (["+hw=cpu", "hw.devices=64"], "hw.devices"),        # more than this machine has
    (["+hw=cpu", "hw.devices=2", "hw.strategy=single"], "hw.strategy"),
    (["+hw=cpu", "hw.devices=2", "hw.strategy=fsdp2", "lane=lora"], "hw.strategy"),
    (["+hw=cpu", "hw.devices=0"], "hw.devices"),
])
def test_bad_device_requests_name_the_key(compile_run, args, key):
    with pytest.raises(ConfigError) as e:
        compile_run(*args, purpose="train")
    assert e.value.key == key


def test_cpu_processes_share_the_machine_budget(compile_run):
    one, _ = compile_run("+hw=cpu", "hw.memory_gb=16")
    two, plan = compile_run("+hw=cpu", "hw.memory_gb=16", "hw.devices=2")
    assert two.budget_gb == pytest.approx(one.budget_gb / 2, abs=1e-3)
    assert plan.world_size == 2 and any("share one machine's memory" in n for n in two.notes)


def test_a_refusal_offers_more_devices_of_the_tier(compile_run):
    _, plan = compile_run("+hw=a100_80g", "+rung=8b", "lane=full", "plan.force=true")
    way = [w for w in plan.ways_out if "devices of this tier" in w]
    assert way and "hw.devices=" in way[0] and "fsdp2" in way[0]
    n = int(way[0].split("hw.devices=")[1].split("`")[0])
    _, many = compile_run("+hw=a100_80g", "+rung=8b", "lane=full", f"hw.devices={n}")
    assert many.fits and many.strategy == "fsdp2"       # the suggestion, planned, fits
