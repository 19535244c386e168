"""Mixtures of experts, Phi-3/4 and Qwen3.5's hybrid attention, planned exactly: PEFT's trainable
count of a LoRA (with and without the fused experts) equals the planner's on a tiny random model
of every new family; the active counts reproduce the published figures; published configs plan on
an 80 GB card with their numbers shown; a dense family refuses lane.lora.experts; Qwen3.5 plans
without packing and counts a recurrent state for its linear-attention layers."""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from mens.errors import ConfigError
from mens.plan.memory import Arch
from mens.source.families import FAMILIES, read_config, rung_fields

CONFIGS = Path(__file__).resolve().parent / "fixtures" / "configs"
NEW = ["qwen3_moe", "mixtral", "gpt_oss", "phi3", "qwen3_5_text", "qwen3_5_moe_text"]


def arch_of(name: str) -> Arch:
    return Arch.of(read_config(CONFIGS / f"{name}.json"))


@pytest.mark.parametrize("family", NEW)
def test_lora_count_equals_peft(family):
    """PEFT 0.21's own trainable count of a LoRA on the family's default targets, and with
    lane.lora.experts (target_parameters on the fused expert weights), as the trainer's
    lora_plan asks PEFT for them, on a tiny random model
    (tests/families_util): the planner's Arch.lora_params, exactly."""
    import transformers
    from peft import LoraConfig, get_peft_model

    from mens.config.schema import LoraConfig as LaneLora
    from mens.model.load import lora_plan

    from tests.families_util import FAMILIES as TINY

    cls, kw = TINY[family][:2]
    config = getattr(transformers, cls)(vocab_size=100, **kw)
    arch = Arch.of(rung_fields({"model_type": family, **config.to_dict()}, "tiny"))
    fam = FAMILIES[family]
    for experts in (False, True) if fam.experts else (False,):
        model = transformers.AutoModelForCausalLM.from_config(config)
        assert sum(p.numel() for p in model.parameters()) == arch.params()["total"]
        # the targets as training makes them (a router that is no nn.Linear: a parameter)
        modules, params = lora_plan(model, LaneLora(r=4, experts=experts), [])
        lora = LoraConfig(r=4, target_modules=list(modules),
                          target_parameters=list(params) or None)
        peft = get_peft_model(model, lora)
        trainable = sum(p.numel() for p in peft.parameters() if p.requires_grad)
        assert arch.lora_params(4, fam.lora_targets, experts) == trainable, (family, experts)
        if experts and fam.experts:   # the experts' adapters are a count of their own
            assert trainable > arch.lora_params(4, fam.lora_targets)


def test_active_counts_reproduce_the_published_figures():
    """`active` = every weight but the experts a token is not routed to, embedding and lm_head
    included (Arch.params). Qwen3-30B-A3B's card: "30.5B in total and 3.3B activated", 29.9B
    non-embedding (Qwen cuts to one decimal); Mixtral-8x7B: 46.7B, 12.9B active (rounded);
    gpt-oss-20b's card (its table: total 20.91B, active 3.61B) leaves the input embedding out."""
    def cut(n):
        return math.floor(n / 1e8) / 10

    q = arch_of("Qwen3-30B-A3B").params()
    assert (cut(q["total"]), cut(q["active"]), cut(q["total"] - q["embed"] - q["lm_head"])) == \
        (30.5, 3.3, 29.9)
    m = arch_of("Mixtral-8x7B-v0.1").params()
    assert (round(m["total"] / 1e9, 1), round(m["active"] / 1e9, 1)) == (46.7, 12.9)
    g = arch_of("gpt-oss-20b").params()
    assert (round(g["total"] / 1e9, 2), round((g["active"] - g["embed"]) / 1e9, 2)) == \
        (20.91, 3.61)
    q35 = arch_of("Qwen3.5-35B-A3B").params()      # "35B-A3B"
    assert (round(q35["total"] / 1e9), round(q35["active"] / 1e9)) == (35, 3)
    for dense in ("phi-4", "Qwen3.5-27B"):
        p = arch_of(dense).params()
        assert p["active"] == p["total"]


def test_speed_counts_the_routed_experts_memory_every_expert():
    """FLOPs follow the active weights: a token multiplies its k of E experts, not all of them;
    the weights the plan holds are all E."""
    from mens.plan.speed import flops_per_token, matmul_params

    a = arch_of("Qwen3-30B-A3B")
    p = a.params()
    routed = p["experts"] * 8 // 128
    assert matmul_params(a) == p["linear"] + routed
    assert flops_per_token(a, "lora", False, 1) == pytest.approx(
        4 * (p["linear"] + routed + a.vocab * a.hidden) + 6 * 48 * 32 * 128)


def test_linear_attention_layers_keep_a_recurrent_state_not_a_kv_cache():
    """Qwen3.5-27B: 16 full-attention layers keep K and V per token; the 48 Gated DeltaNet
    layers a state per sequence (48 value heads × 128 × 128 fp32 + the conv's 4 taps of its
    16·128·2 + 48·128 channels), whatever the length."""
    a = arch_of("Qwen3.5-27B")
    assert (a.attn_layers, a.linear_layers) == (16, 48)
    kv = 16 * 2 * 4 * 256 * 2
    state = 48 * 128 * 128 * 4 + (2 * 16 * 128 + 48 * 128) * 4 * 2
    assert a.state_bytes(1, 1000, 2) == 1000 * kv + 48 * state
    assert a.state_bytes(1, 2000, 2) - a.state_bytes(1, 1000, 2) == 1000 * kv


def hf(tmp_path: Path, name: str) -> str:
    d = tmp_path / name
    d.mkdir()
    shutil.copy(CONFIGS / f"{name}.json", d / "config.json")
    return str(d)


@pytest.mark.parametrize("name, experts, verdict", [
    ("Qwen3-30B-A3B", False, "fits"), ("gpt-oss-20b", False, "fits"),
    # LoRA on all 128 × 48 experts: 644M fp32 adapters, their grads and AdamW state
    ("Qwen3-30B-A3B", True, "refuses")])
def test_lora_plan_of_a_published_moe_on_an_80gb_card(compile_run, tmp_path, name, experts,
                                                      verdict):
    from mens.plan.output import render

    spec, p = compile_run("+hw=a100_80g", "+rung=hf", f"rung.path={hf(tmp_path, name)}",
                          "lane=lora", f"lane.lora.experts={str(experts).lower()}")
    assert p.verdict == verdict, p.peak_bytes
    a = Arch.of(spec.rung)
    assert p.params_total == a.params()["total"] and p.params_active == a.params()["active"]
    assert p.params_trainable == a.lora_params(16, spec.lane.lora.targets, experts)
    record = p.to_dict()   # plan.json's counts
    assert (record["params_total"], record["params_active"], record["experts"]) == \
        (a.params()["total"], a.params()["active"], a.experts)
    text = render(spec, p)
    assert f"{p.params_total:,}" in text and f"{p.params_trainable:,}" in text
    assert f"active, {a.experts} experts, {a.experts_per_tok} routed" in text
    assert "predicted peak" in text and "budget" in text and "MiB fp32" in text
    assert any("expert parallelism is not planned" in n for n in spec.notes)
    assert any("MXFP4" in n for n in spec.notes) == (name == "gpt-oss-20b")


def test_experts_on_a_dense_family_is_a_config_error(compile_run, tmp_path):
    with pytest.raises(ConfigError) as e:
        compile_run("+hw=a100_80g", "+rung=hf", f"rung.path={hf(tmp_path, 'phi-4')}",
                    "lane=lora", "lane.lora.experts=true")
    assert e.value.key == "lane.lora.experts" and "phi3" in e.value.message


def test_qwen35_plans_without_packing_and_says_why(compile_run, tmp_path):
    spec, p = compile_run("+hw=a100_80g", "+rung=hf",
                          f"rung.path={hf(tmp_path, 'Qwen3.5-35B-A3B')}", "lane=lora")
    assert spec.train.packing is False and p.shape.packing is False
    assert any(n.startswith("FALLBACK packing") and "Gated DeltaNet" in n for n in spec.notes)
    assert any("recurrent state" in n for n in spec.notes)
    # the family's targets are written into the spec: the trainer adapts what was planned
    assert tuple(spec.lane.lora.targets) == FAMILIES["qwen3_5_moe_text"].lora_targets


@pytest.mark.parametrize("rung, name", [("qwen3-30b-a3b", "Qwen3-30B-A3B"),
                                        ("gpt-oss-20b", "gpt-oss-20b")])
def test_moe_rungs_are_their_published_configs(compile_run, rung, name):
    """conf/rung's MoE rungs carry the numbers of their config.json (fixtures): the same
    architecture field for field, so the same exact counts; they plan as `+rung=<name>` and
    `mens recommend` and the ladder list them."""
    from omegaconf import OmegaConf

    from mens.config.schema import RecommendConfig
    from mens.plan.spec import MOE_RUNGS
    from mens.resources import option_path

    fields = read_config(CONFIGS / f"{name}.json")
    conf = OmegaConf.to_container(OmegaConf.load(option_path("rung", rung)))
    assert {k: conf.get(k, 0) for k in fields} == fields
    spec, p = compile_run("+hw=h200", f"+rung={rung}", "lane=lora")
    assert p.params_total == arch_of(name).params()["total"]
    assert p.params_active == arch_of(name).params()["active"] < p.params_total
    assert rung in MOE_RUNGS and rung in RecommendConfig().rungs
