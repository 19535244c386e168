"""Resolution: the RunSpec is typed, immutable, has no `auto` left, and says what it changed."""
from __future__ import annotations

import dataclasses
import json

import pytest

import mens.plan.spec
from mens.plan.hardware import cuda_tier
from mens.errors import ConfigError


def walk(d):
    if isinstance(d, dict):
        for v in d.values():
            yield from walk(v)
    elif isinstance(d, (list, tuple)):
        for v in d:
            yield from walk(v)
    else:
        yield d


def test_runspec_is_frozen_typed_and_fully_resolved(compile_run):
    spec, plan = compile_run("+hw=rtx4090", "+rung=1.7b")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.train.micro_batch = 99
    resolved = spec.config_dict()
    assert (resolved["hw"]["devices"], resolved["hw"]["strategy"]) == (1, "single")
    assert resolved["data"].pop("format") == "auto"   # spoke data has mens's own record schema
    assert "auto" not in list(walk(resolved))
    assert isinstance(spec.train.seq_len, int) and isinstance(spec.lane.gradient_checkpointing, bool)
    assert spec.train.micro_batch * spec.train.grad_accum == spec.train.global_batch
    assert spec.lane.precision == "bf16" and spec.hw.backend == "cuda"
    assert isinstance(spec.rung.hidden_size, int) and spec.lane.lora.targets[0] == "q_proj"


def test_auto_hw_detects_this_machine(compile_run):
    import psutil
    spec, plan = compile_run("+hw=auto")
    assert spec.hw.backend == "cpu" and spec.detected["backend"] == "cpu"
    avail = psutil.virtual_memory().available / 2**30
    # budget = available − max(10 %, 1 GiB), within what the machine freed meanwhile
    assert 0 < spec.budget_gb <= avail
    assert spec.lane.precision == "fp32"


def test_hw_memory_gb_overrides_any_tier(compile_run):
    spec, _ = compile_run("+hw=h100", "hw.memory_gb=40")
    assert spec.hw.memory_gb == 40
    # 40 − 0.75 reserve = 39.25 usable, − max(5 %, 0.5) headroom
    assert abs(spec.budget_gb - 39.25 * 0.95) < 1e-3


def test_bf16_fallback_is_loud(compile_run):
    spec, _ = compile_run("+hw=cpu", "lane.precision=bf16")
    assert spec.lane.precision == "fp32"
    assert any(n.startswith("GPU_FALLBACK") for n in spec.notes)


def test_seq_len_from_the_length_manifest(compile_run, tmp_path, monkeypatch):
    spoke = tmp_path / "vox_lang"
    spoke.mkdir()
    (spoke / "lengths.json").write_text(json.dumps(
        {"p99_tokens": 700, "p99_chars": 3500, "est_chars_per_token": 3.5}))
    monkeypatch.setattr(mens.plan.spec, "DATA_DIR", tmp_path)
    spec, _ = compile_run("+hw=h100")                   # tiny: its own tokenizer counted
    assert spec.train.seq_len == 768                    # 700 rounded up to a multiple of 128
    assert not any("estimate" in n for n in spec.notes)
    spec, _ = compile_run("+hw=h100", "+rung=0.6b")     # Qwen3 tokenizer absent: estimate
    assert spec.train.seq_len == 1024
    assert any("estimate" in n for n in spec.notes)


def test_seq_len_without_manifest_says_so(compile_run, tmp_path, monkeypatch):
    monkeypatch.setattr(mens.plan.spec, "DATA_DIR", tmp_path)
    spec, _ = compile_run("+hw=h100", "spoke=rust_workspace")
    assert spec.train.seq_len == 2048
    assert any("no length manifest" in n for n in spec.notes)


def test_unpinned_revision_is_reported(compile_run):
    spec, _ = compile_run("+hw=h100", "+rung=4b")
    assert spec.rung.revision is None
    assert any("unpinned" in n for n in spec.notes)


def test_random_init_needs_no_weights_to_train(compile_run, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as e:
        compile_run("+hw=cpu", "+rung=0.6b", purpose="train")
    assert "hf download Qwen/Qwen3-0.6B" in e.value.message and "HF_HUB_OFFLINE" in e.value.message
    with pytest.raises(ConfigError):   # rung.download=false: never download, online or not
        monkeypatch.delenv("HF_HUB_OFFLINE")
        compile_run("+hw=cpu", "+rung=0.6b", "rung.download=false", purpose="train")
    spec, _ = compile_run("+hw=cpu", "+rung=0.6b", purpose="train")   # online: fetched later
    assert any("downloaded after the plan fits" in n for n in spec.notes)
    spec, _ = compile_run("+hw=cpu", "+rung=0.6b", "rung.init=random", purpose="train")
    assert spec.rung.init == "random"


def test_dpo_from_sft_adapter_plans_the_frozen_reference(compile_run):
    _, plain = compile_run("+hw=h100", "lane=dpo", "spoke=skill_creation",
                           "train.micro_batch=1", "lane.gradient_checkpointing=false")
    _, from_sft = compile_run("+hw=h100", "lane=dpo", "spoke=skill_creation",
                              "train.micro_batch=1", "lane.gradient_checkpointing=false",
                              "train.init_adapter=/some/sft/adapter")
    assert from_sft.components["weights"] > plain.components["weights"]


@pytest.mark.parametrize("name, gb, tier", [
    ("NVIDIA GeForce RTX 4090", 23.6, "rtx4090"), ("NVIDIA A100-SXM4-80GB", 79.2, "a100_80g"),
    ("NVIDIA A100-PCIE-40GB", 39.4, "a100_40g"), ("NVIDIA H200", 139.8, "h200"),
    ("NVIDIA GeForce RTX 4080 SUPER", 15.7, "rtx4080s"), ("Tesla T4", 14.6, None)])
def test_detected_cuda_devices_map_to_tiers(name, gb, tier):
    assert cuda_tier(name, gb) == tier


def test_auto_lr_and_batch_come_from_the_rung(compile_run):
    from mens.config.options import load_option

    tiny, big = load_option("rung", "tiny"), load_option("rung", "0.6b")
    spec, _ = compile_run("+hw=cpu")
    assert spec.lane.optimizer.lr == tiny.lora_lr
    assert spec.train.global_batch == (tiny.global_batch or spec.train.default_global_batch)
    spec, _ = compile_run("+hw=h100", "+rung=0.6b")
    assert spec.lane.optimizer.lr == big.lora_lr == 2e-4 and spec.train.global_batch == 16
    spec, _ = compile_run("+hw=h100", "+rung=0.6b", "lane=full")
    assert spec.lane.optimizer.lr == big.full_lr
    spec, _ = compile_run("+hw=cpu", "lane.optimizer.lr=3e-4", "train.global_batch=8")
    assert spec.lane.optimizer.lr == 3e-4 and spec.train.global_batch == 8


def test_bad_lr_is_a_config_error(compose):
    from mens.errors import ConfigError

    with pytest.raises(ConfigError, match="lane.optimizer.lr"):
        compose(["lane.optimizer.lr=-1"])
