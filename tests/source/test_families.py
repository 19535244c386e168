"""Model families: a real config.json → rung fields → the planner's exact parameter count, equal
to transformers' own build of that config.json on the meta device; tiny random models of every
family load and run; unsupported configs fail with a ConfigError naming file and fix."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mens.errors import ConfigError
from mens.source.families import (FAMILIES, LINEAR_FIELDS, MOE_FIELDS, config_kwargs,
                                   read_config, rung_fields)
from mens.plan.memory import Arch

CONFIGS = Path(__file__).resolve().parent.parent / "plan" / "fixtures" / "configs"
# Published config.json files (see tests/plan/fixtures/configs) and their parameter counts:
# Llama-3.1-8B and Qwen3-0.6B as shared/REFERENCE.md gives them; the others as transformers
# 5.24 builds them on the meta device (they match the model cards: 7.25B, 1.54B, 2.61B, 1B;
# gemma-3-4b-it's text model without its vision tower).
PARAMS = {"Llama-3.1-8B": 8_030_261_248, "Qwen3-0.6B": 596_049_920,
          "Qwen2.5-1.5B-Instruct": 1_543_714_304, "Mistral-7B-v0.3": 7_248_023_552,
          "gemma-2-2b": 2_614_341_888, "gemma-3-1b-it": 999_885_952,
          "gemma-3-4b-it": 3_880_263_168,
          # mixtures of experts, Phi-4 and Qwen3.5 (tests/plan/test_moe_plan.py pins their
          # active counts against the published figures)
          "Qwen3-30B-A3B": 30_532_122_624, "gpt-oss-20b": 20_914_757_184,
          "Mixtral-8x7B-v0.1": 46_702_792_704, "phi-4": 14_659_507_200,
          "Qwen3.5-27B": 26_895_998_464, "Qwen3.5-35B-A3B": 34_660_610_688}
FAMILY = {"Llama-3.1-8B": "llama", "Qwen3-0.6B": "qwen3", "Qwen2.5-1.5B-Instruct": "qwen2",
          "Mistral-7B-v0.3": "mistral", "gemma-2-2b": "gemma2", "gemma-3-1b-it": "gemma3_text",
          "gemma-3-4b-it": "gemma3_text", "Qwen3-30B-A3B": "qwen3_moe", "gpt-oss-20b": "gpt_oss",
          "Mixtral-8x7B-v0.1": "mixtral", "phi-4": "phi3", "Qwen3.5-27B": "qwen3_5_text",
          "Qwen3.5-35B-A3B": "qwen3_5_moe_text"}
DENSE_ZEROS = (*MOE_FIELDS, "linear_attention_layers", *LINEAR_FIELDS)
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 128}


def model_dir(tmp_path: Path, config: dict) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def meta_count(directory: Path) -> int:
    """transformers' own reading of a config.json (AutoConfig, the text model of a multimodal
    one), built by AutoModelForCausalLM on the meta device; tied weights count once."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(directory)).get_text_config()
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters()), model


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_planner_count_equals_meta_build(name, tmp_path):
    shutil.copy(CONFIGS / f"{name}.json", tmp_path / "config.json")
    fields = read_config(tmp_path)
    arch = Arch.of(fields)
    assert fields["family"] == arch.family == FAMILY[name]
    counted, model = meta_count(tmp_path)
    assert arch.params()["total"] == counted == PARAMS[name]
    # LoRA on the family's default targets: r·(in + out) of each such module's weight (a MoE
    # router is a module of its own holding an [E, h] weight), the fused experts r·E·(in + out)
    fam = FAMILIES[fields["family"]]
    by_hand = sum(16 * sum(m.weight.shape) for n, m in model.named_modules()
                  if n.rsplit(".", 1)[-1] in fam.lora_targets)
    assert arch.lora_params(16, fam.lora_targets) == by_hand
    experts = sum(16 * p.shape[0] * (p.shape[1] + p.shape[2]) for n, p in model.named_parameters()
                  if any(n.endswith(e) for e in fam.experts))
    assert arch.lora_params(16, fam.lora_targets, experts=True) == by_hand + experts


def test_llama_31_8b_fields():
    f = read_config(CONFIGS / "Llama-3.1-8B.json")
    assert f == {"family": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                 "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                 "head_dim": 128, "vocab_size": 128256, "tie_word_embeddings": False,
                 "max_position_embeddings": 131072, "rope_theta": 500000.0,
                 "rms_norm_eps": 1e-5, **{k: 0 for k in DENSE_ZEROS}}
    assert Arch.of(f).params()["total"] == 8_030_261_248


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_defaults_are_transformers_defaults(family, tmp_path):
    """A config.json naming only what mens requires: every default the family row fills in
    (head_dim, kv heads, tying, context, rope_theta, eps) is what transformers fills in."""
    from transformers import AutoConfig

    # (no special token ids: Phi-3's class default pad id 32000 lies outside a 128 vocabulary)
    minimal = {"model_type": family, "hidden_size": 64, "intermediate_size": 128,
               "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128,
               "pad_token_id": None, "bos_token_id": None, "eos_token_id": None}
    d = model_dir(tmp_path, minimal)
    f = rung_fields(minimal, "config.json")
    counted, _ = meta_count(d)
    assert Arch.of(f).params()["total"] == counted
    c = AutoConfig.from_pretrained(str(d))
    rope = c.rope_parameters.get("full_attention", c.rope_parameters)["rope_theta"]
    assert (f["max_position_embeddings"], f["rms_norm_eps"], f["rope_theta"],
            f["tie_word_embeddings"], f["num_key_value_heads"]) == (
        c.max_position_embeddings, c.rms_norm_eps, rope, c.tie_word_embeddings,
        c.num_key_value_heads)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_tiny_random_model_per_family(family):
    """Random weights from the rung fields alone (no config.json): the family's class, the
    planner's count, a forward pass and a backward pass."""
    import torch

    from mens.model.load import load_base

    # the family's own fields too (experts, linear attention: its class defaults at this size)
    fields = rung_fields({"model_type": family, **TINY}, "c.json")
    rung = {"name": f"tiny-{family}", "init": "random", **fields,
            "tie_word_embeddings": False, "max_position_embeddings": 256}
    notes: list[str] = []
    model = load_base(rung, kind="full", notes=notes)
    assert type(model).__name__ == FAMILIES[family].causal_lm_class
    assert sum(p.numel() for p in model.parameters()) == Arch.of(rung).params()["total"]
    ids = torch.randint(0, 128, (2, 12))
    out = model(input_ids=ids, labels=ids, use_cache=False)
    assert out.logits.shape == (2, 12, 128) and torch.isfinite(out.loss)
    out.loss.backward()
    expected = FAMILIES[family].attn or "sdpa"
    assert model.config._attn_implementation == expected
    assert bool(notes) == (expected != "sdpa")


def test_random_init_with_path_uses_its_config_json(tmp_path):
    """Gemma 2's soft-capping and sliding window are not rung fields: random init from a
    rung.path builds that config.json itself, and says it trains with eager attention."""
    from mens.model.load import load_base

    config = json.loads((CONFIGS / "gemma-2-2b.json").read_text())
    config.update(TINY, sliding_window=8)
    d = model_dir(tmp_path / "g2", config)
    rung = {"name": "g2", "init": "random", "path": str(d), **rung_fields(config, "x")}
    notes: list[str] = []
    model = load_base(rung, notes=notes)
    c = model.config
    assert type(model).__name__ == "Gemma2ForCausalLM"
    assert (c.final_logit_softcapping, c.attn_logit_softcapping, c.sliding_window) == (30.0, 50.0, 8)
    assert c._attn_implementation == "eager" and "eager" in notes[0] and "soft-cap" in notes[0]
    assert sum(p.numel() for p in model.parameters()) == Arch.of(rung).params()["total"]


def test_pretrained_load_follows_the_weights_config(tmp_path):
    """Saved weights of a family load through AutoModelForCausalLM with the family's
    attention, even from a rung whose family was never filled in (default qwen3)."""
    from mens.model.load import load_base

    config = json.loads((CONFIGS / "gemma-2-2b.json").read_text())
    config.update(TINY)
    rung = {"name": "g2", "init": "random", "path": str(model_dir(tmp_path / "src", config)),
            **rung_fields(config, "x")}
    load_base(rung, notes=[]).save_pretrained(str(tmp_path / "w"))
    notes: list[str] = []
    model = load_base({"name": "g2", "path": str(tmp_path / "w")}, notes=notes)
    assert type(model).__name__ == "Gemma2ForCausalLM"
    assert model.config._attn_implementation == "eager" and notes


def test_multimodal_gemma3_takes_text_config():
    notes: list[str] = []
    f = read_config(CONFIGS / "gemma-3-4b-it.json", notes)
    assert f["family"] == "gemma3_text" and f["vocab_size"] == 262208 and f["hidden_size"] == 2560
    assert "text_config" in notes[0] and "vision tower is not counted" in notes[0]


def test_unknown_model_type_names_the_file_and_families():
    with pytest.raises(ConfigError) as e:
        rung_fields({"model_type": "falcon", **TINY}, "/models/falcon/config.json")
    msg = e.value.message
    assert "/models/falcon/config.json" in msg and "'falcon'" in msg
    for fam in ("qwen2", "qwen3", "llama", "mistral", "gemma2", "gemma3_text", "gemma3", "olmo2",
                "qwen3_moe", "mixtral", "gpt_oss", "phi3", "qwen3_5"):
        assert fam in msg
    with pytest.raises(ConfigError):
        Arch(64, 128, 2, 4, 2, 16, 128, False, "falcon").params()


def test_missing_key_names_the_file_and_key():
    config = {"model_type": "llama", **TINY}
    del config["intermediate_size"]
    with pytest.raises(ConfigError) as e:
        rung_fields(config, "/x/config.json")
    assert "/x/config.json" in e.value.message and "'intermediate_size'" in e.value.message


def test_bias_the_count_cannot_express_is_refused():
    with pytest.raises(ConfigError) as e:
        rung_fields({"model_type": "llama", **TINY, "attention_bias": True}, "c.json")
    assert "attention_bias" in e.value.message
    assert rung_fields({"model_type": "qwen2", **TINY}, "c.json")["family"] == "qwen2"


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not readable JSON"):
        read_config(tmp_path)


def test_arch_of_rungs_without_family_is_qwen3():
    """Rungs and records from before the field: dicts, positional Arch(...) — all Qwen3."""
    rung = {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
            "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
            "vocab_size": 151936, "tie_word_embeddings": True}
    assert Arch.of(rung).family == "qwen3"
    assert Arch.of(rung) == Arch(1024, 3072, 28, 16, 8, 128, 151936, True)
    assert Arch.of(rung).params()["total"] == 596_049_920


@pytest.mark.parametrize("family", ["gemma2", "gemma3_text"])
def test_gemma_config_naming_nothing_is_the_class_default_model(family, tmp_path):
    """Gemma's config.json files lean on their class's defaults for the architecture itself."""
    d = model_dir(tmp_path, {"model_type": family})
    counted, _ = meta_count(d)
    assert Arch.of(rung_fields({"model_type": family}, "c.json")).params()["total"] == counted


def test_every_row_names_a_llama_cpp_arch_a_chat_format_and_linear_targets():
    """A row's export facts point at things that exist: gguf-py's architecture names, mens's
    chat formats (or None: the Modelfile then tries them all), the decoder's linear layers."""
    import gguf

    from mens.export.modelfile import FORMATS

    for f in FAMILIES.values():
        fields = rung_fields({"model_type": f.model_type, **TINY}, "c.json")
        linear = Arch.of(fields).linear_shapes()
        assert f.gguf_arch in gguf.MODEL_ARCH_NAMES.values(), f
        assert f.chat is None or f.chat in FORMATS, f
        assert set(f.lora_targets) <= set(f.linear) <= set(linear), f
        assert f.qk_norm in ("", "head", "proj"), f


def test_olmo2_qk_norms_span_the_whole_projections():
    """OLMo 2 normalises all of q (heads·d) and k (kv_heads·d), not one head_dim as Qwen3."""
    olmo, qwen = (Arch(64, 128, 2, 4, 2, 16, 128, False, f).params() for f in ("olmo2", "qwen3"))
    assert olmo["norms"] == 2 * (2 * 64 + 4 * 16 + 2 * 16) + 64
    assert qwen["norms"] == 2 * (2 * 64 + 2 * 16) + 64


def test_moe_keys_the_count_cannot_express_are_refused():
    """gpt-oss without its attention biases and Qwen3-MoE with dense layers between its sparse
    ones would plan parameters the model does not have (or miss some): refused, naming them."""
    moe = {**TINY, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
    with pytest.raises(ConfigError, match="attention_bias: false"):
        rung_fields({"model_type": "gpt_oss", **moe, "attention_bias": False}, "c.json")
    for bad in ({"mlp_only_layers": [0]}, {"decoder_sparse_step": 2}):
        with pytest.raises(ConfigError, match="experts in every layer"):
            rung_fields({"model_type": "qwen3_moe", **moe, **bad}, "c.json")
    f = rung_fields({"model_type": "mixtral", **TINY, "num_local_experts": 4}, "c.json")
    assert (f["num_experts"], f["num_experts_per_tok"], f["moe_intermediate_size"]) == (4, 2, 128)


def test_linear_attention_layers_by_layer_types_or_interval():
    base = {"model_type": "qwen3_5_text", **TINY, "num_hidden_layers": 8}
    assert rung_fields(base, "c.json")["linear_attention_layers"] == 6     # interval 4: 3 of 4
    assert rung_fields({**base, "full_attention_interval": 2}, "c.json")[
        "linear_attention_layers"] == 4
    types = ["linear_attention"] * 7 + ["full_attention"]
    assert rung_fields({**base, "layer_types": types}, "c.json")["linear_attention_layers"] == 7
    with pytest.raises(ConfigError, match="layer_types"):
        rung_fields({**base, "layer_types": types[:3]}, "c.json")


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral", "gpt_oss", "qwen3_5_text",
                                    "qwen3_5_moe_text"])
def test_config_kwargs_rebuild_the_rung(family, tmp_path):
    """A rung's experts and linear-attention fields, written back as config.json keys
    (families.config_kwargs, for a random model from rung fields), build the model the rung
    counts: rung_fields of that config.json is the rung again."""
    small = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
             "shared_expert_intermediate_size": 16, "linear_attention_layers": 3,
             "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
             "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4}
    fields = rung_fields({"model_type": family, **TINY, "num_hidden_layers": 4}, "c.json")
    rung = {**fields, **{k: v for k, v in small.items() if fields[k]}}
    config = {"model_type": family, **TINY, "num_hidden_layers": 4, **config_kwargs(rung)}
    if family in ("mixtral", "gpt_oss"):   # their experts' width is intermediate_size
        rung["intermediate_size"] = rung["moe_intermediate_size"]
        config["intermediate_size"] = rung["moe_intermediate_size"]
    assert rung_fields(config, "c.json") == rung
    counted, _ = meta_count(model_dir(tmp_path, config))
    assert Arch.of(rung).params()["total"] == counted
