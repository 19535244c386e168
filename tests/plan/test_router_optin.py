"""A mixture of experts' router is no default LoRA target (issue #49, item 9): PEFT's, TRL's and
Unsloth's recipes leave it frozen, so mens's trainable counts are theirs — gpt-oss-20b at r 8 on
attention is the 3,981,312 Unsloth's gpt-oss notebook prints, not 4,540,416 (the router's LoRA
on top) — and `lane.lora.router=true` adapts it, the plan saying which and how to change it.
The planner's count and PEFT's own agree with the router on and off: on the published
architectures built on the meta device, and on a tiny random model of every MoE family."""
from __future__ import annotations

from pathlib import Path

import pytest

from mens.config.schema import LORA_TARGETS
from mens.errors import ConfigError
from mens.plan.memory import Arch
from mens.source.families import FAMILIES, lora_targets, read_config

CONFIGS = Path(__file__).resolve().parent / "fixtures" / "configs"
MOE = ["qwen3_moe", "mixtral", "gpt_oss", "qwen3_5_moe_text"]


@pytest.mark.parametrize("rung, frozen, adapted", [
    # Unsloth's gpt-oss-(20B)-Fine-tuning notebook (r 8; its q..down_proj list reaches attention
    # only: gpt-oss has no gate/up/down_proj Linear) prints "Trainable parameters = 3,981,312";
    # the router adds 24 layers × 8 · (2880 + 32)
    ("gpt-oss-20b", 3_981_312, 3_981_312 + 24 * 8 * (2880 + 32)),
    # Qwen3-30B-A3B by hand from its config.json: 48 layers × 8 · (q 2048+4096, k and v
    # 2048+512, o 4096+2048); the router `gate` adds 48 × 8 · (2048 + 128)
    ("qwen3-30b-a3b", 48 * 8 * (2 * 6144 + 2 * 2560), 48 * 8 * (2 * 6144 + 2 * 2560 + 2176))])
def test_the_router_is_frozen_unless_asked_and_the_plan_says_so(compile_run, rung, frozen,
                                                                adapted):
    from mens.plan.output import render

    router = {"gpt-oss-20b": "router", "qwen3-30b-a3b": "gate"}[rung]
    spec, p = compile_run("+hw=h200", f"+rung={rung}", "lane=lora", "lane.lora.r=8")
    assert p.params_trainable == frozen and router not in spec.lane.lora.targets
    assert spec.lane.lora.router is False
    said = [n for n in spec.notes if "router" in n and "lane.lora.router=true" in n]
    assert len(said) == 1 and "frozen" in said[0] and f"{adapted - frozen:,}" in said[0], spec.notes
    assert " ".join(said[0].split()) in " ".join(render(spec, p).split())   # printed, wrapped

    spec, p = compile_run("+hw=h200", f"+rung={rung}", "lane=lora", "lane.lora.r=8",
                          "lane.lora.router=true")
    assert p.params_trainable == adapted and router in spec.lane.lora.targets
    said = [n for n in spec.notes if "router" in n and "lane.lora.router=false" in n]
    assert len(said) == 1 and "adapted" in said[0], spec.notes


def test_naming_the_router_in_the_targets_adapts_it_and_the_spec_says_so(compile_run):
    """An explicit list that names the router (a spec.yaml from before the switch) adapts it,
    and the resolved spec records lane.lora.router=true: the two never disagree."""
    spec, p = compile_run("+hw=h200", "+rung=gpt-oss-20b", "lane=lora", "lane.lora.r=8",
                          "lane.lora.targets=[q_proj,k_proj,v_proj,o_proj,router]")
    assert spec.lane.lora.router is True and p.params_trainable == 4_540_416


def test_router_on_a_dense_model_is_a_config_error(compile_run):
    with pytest.raises(ConfigError) as e:
        compile_run("+rung=tiny", "lane=lora", "lane.lora.router=true")
    assert e.value.key == "lane.lora.router" and "dense" in e.value.message


@pytest.mark.slow   # ~10 s: the published gpt-oss-20b built on the meta device, then PEFT on it
def test_gpt_oss_20b_peft_count_is_the_published_one():
    """PEFT's own trainable count of r 8 with the targets the trainer asks it for
    (mens.model.load.lora_plan), router on, on gpt-oss-20b's published config (meta device):
    4,540,416, of which the router's adapters are 559,104 — the rest, 3,981,312, is the
    default (router frozen) and the published figure; the planner's counts are the same."""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    from mens.config.schema import LoraConfig as LaneLora
    from mens.model.load import lora_plan

    fields = read_config(CONFIGS / "gpt-oss-20b.json")
    config = transformers.AutoConfig.from_pretrained(CONFIGS / "gpt-oss-20b.json")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    modules, params = lora_plan(model, LaneLora(r=8, router=True), [])
    assert "router.weight" in params
    peft = get_peft_model(model, LoraConfig(r=8, target_modules=list(modules),
                                            target_parameters=list(params)))
    counts = {True: 0, False: 0}   # router's adapters or not → their size
    for n, p in peft.named_parameters():
        if p.requires_grad:
            counts[".router." in n] += p.numel()
    fam, arch = FAMILIES["gpt_oss"], Arch.of(fields)
    assert (counts[False], counts[True]) == (3_981_312, 559_104)
    assert arch.lora_params(8, lora_targets(fam, LORA_TARGETS)) == 3_981_312
    assert arch.lora_params(8, lora_targets(fam, LORA_TARGETS, router=True)) == 4_540_416


@pytest.mark.parametrize("family", MOE)
def test_router_optin_counts_equal_peft_on_a_tiny_moe(family):
    """The planner's count with the router adapted equals PEFT's on a tiny random model, and
    the router's share is exactly the difference from the default (frozen) adapter."""
    import transformers
    from peft import LoraConfig, get_peft_model

    from mens.config.schema import LoraConfig as LaneLora
    from mens.model.load import lora_plan
    from mens.source.families import rung_fields

    from tests.families_util import FAMILIES as TINY

    cls, kw = TINY[family][:2]
    config = getattr(transformers, cls)(vocab_size=100, **kw)
    arch = Arch.of(rung_fields({"model_type": family, **config.to_dict()}, "tiny"))
    fam = FAMILIES[family]
    counts = {}
    for router in (False, True):
        model = transformers.AutoModelForCausalLM.from_config(config)
        modules, params = lora_plan(model, LaneLora(r=4, router=router), [])
        peft = get_peft_model(model, LoraConfig(r=4, target_modules=list(modules),
                                                target_parameters=list(params) or None))
        wrapped = {n.rsplit(".", 1)[-1] for n, m in peft.named_modules() if hasattr(m, "lora_A")}
        assert (fam.router in wrapped) == router, (family, router, wrapped)
        counts[router] = sum(p.numel() for p in peft.parameters() if p.requires_grad)
        assert counts[router] == arch.lora_params(4, lora_targets(fam, LORA_TARGETS, router))
    assert counts[True] - counts[False] == arch.lora_params(4, (fam.router,)) > 0



def saved_adapter(tmp_path: Path, **config) -> Path:
    """An adapter dir as PEFT saves one (its safetensors header empty: nothing to shape-check)."""
    import json
    import struct

    d = tmp_path / "adapter"
    d.mkdir()
    (d / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": 8, "lora_alpha": 16, "lora_dropout": 0.0,
        "base_model_name_or_path": "openai/gpt-oss-20b",
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], **config}))
    header = json.dumps({"__metadata__": {}}).encode()
    (d / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return d


@pytest.mark.parametrize("params, router, experts", [
    ([], False, False), (["router.weight"], True, False),
    (["router.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"], True, True)])
def test_an_adapter_to_continue_brings_its_router_and_experts(compile_run, tmp_path, params,
                                                              router, experts):
    """`adapter=` trains the saved adapter as it is (PEFT loads its targets and parameters): a
    router or experts it adapts are planned, the switches set and said."""
    d = saved_adapter(tmp_path, target_parameters=params or None)
    spec, p = compile_run("+hw=h200", "+rung=gpt-oss-20b", "lane=lora", f"adapter={d}")
    lora = spec.lane.lora
    assert (lora.r, lora.router, lora.experts) == (8, router, experts)
    assert p.params_trainable == Arch.of(spec.rung).lora_params(8, lora.targets, experts)
    assert p.params_trainable == (4_540_416 if router else 3_981_312) or experts
    assert any("lane.lora.router False → True" in n for n in spec.notes) == router


def test_dropout_with_the_router_adapted_is_refused_at_plan_time(compile_run):
    """PEFT applies no dropout inside the wrapper a router (or a fused expert) gets — the
    trainer raises (mens.model.load.lora_plan) — so the plan says so first, naming the keys;
    with the router frozen, dropout on the attention adapters plans."""
    spec, p = compile_run("+hw=h200", "+rung=gpt-oss-20b", "lane=lora", "lane.lora.dropout=0.05")
    assert spec.lane.lora.router is False
    for extra in ("lane.lora.router=true", "lane.lora.experts=true"):
        with pytest.raises(ConfigError) as e:
            compile_run("+hw=h200", "+rung=gpt-oss-20b", "lane=lora", "lane.lora.dropout=0.05",
                        extra)
        assert e.value.key == "lane.lora.dropout" and extra.split("=")[0] in e.value.message
