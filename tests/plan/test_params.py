"""Parameter counts: the analytic count equals shared/REFERENCE.md and a meta-device Qwen3."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from mens.resources import CONF_DIR
from mens.plan.memory import Arch

# From ../shared/REFERENCE.md ("params (meta-device count)"), copied so CI needs no sibling dir.
REFERENCE = {"0.6b": 596_049_920, "1.7b": 1_720_574_976, "4b": 4_022_468_096,
             "8b": 8_190_735_360, "14b": 14_768_307_200, "32b": 32_762_123_264}


def rung(name):
    return OmegaConf.load(CONF_DIR / "rung" / f"{name}.yaml")


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_analytic_count_matches_reference(name):
    assert Arch.of(rung(name)).params()["total"] == REFERENCE[name]


@pytest.mark.parametrize("name", ["tiny", *sorted(REFERENCE)])
def test_analytic_count_matches_qwen3_on_meta_device(name):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    r = rung(name)
    config = Qwen3Config(
        hidden_size=r.hidden_size, intermediate_size=r.intermediate_size,
        num_hidden_layers=r.num_hidden_layers, num_attention_heads=r.num_attention_heads,
        num_key_value_heads=r.num_key_value_heads, head_dim=r.head_dim,
        vocab_size=r.vocab_size, tie_word_embeddings=r.tie_word_embeddings,
        max_position_embeddings=r.max_position_embeddings)
    with torch.device("meta"):
        model = Qwen3ForCausalLM(config)
    counted = sum(p.numel() for p in model.parameters())   # tied weights count once
    assert counted == Arch.of(r).params()["total"]
    lora = Arch.of(r).lora_params(16, ["q_proj", "k_proj", "v_proj", "o_proj",
                                       "gate_proj", "up_proj", "down_proj"])
    by_hand = sum(16 * (m.in_features + m.out_features) for n, m in model.named_modules()
                  if n.rsplit(".", 1)[-1].endswith("_proj"))
    assert lora == by_hand
