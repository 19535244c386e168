"""Qwen3.5 (dense `qwen35`, MoE `qwen35moe`) for llama.cpp, as convert_hf_to_gguf.py's
Qwen3_5TextModel / Qwen3_5MoeTextModel write it (conversion/qwen.py at the llama.cpp commit
llama-cpp-python 0.3.36 vendors: Qwen3NextModel, _LinearAttentionVReorderBase,
_Qwen35MRopeMixin).

Gated DeltaNet (linear-attention) layers: A_log is stored as -exp(A_log) (`ssm_a`), dt_bias as
`ssm_dt.bias`, the depthwise conv1d [C, 1, K] squeezed to [C, K]; where there are more value
heads than key heads, the value heads are reordered from grouped by key head (HF) to tiled
(ggml's broadcast) in every tensor that carries them. Every RMSNorm but the DeltaNet's own
gated norm computes (1 + w) in transformers: + 1, as for Gemma. The gated full-attention q_proj
(queries and their gate, per head) is written as it is. The M-RoPE sections are written even
for a text-only checkpoint ([11, 11, 10, 0] when config.json has none), as llama.cpp requires
them; with text positions all equal M-RoPE is the plain rotary embedding.
"""
from __future__ import annotations

ARCHS = ("qwen35", "qwen35moe")
DEFAULT_MROPE = [11, 11, 10, 0]


def source(name: str, shape: tuple) -> tuple[str, tuple]:
    """(the name gguf-py's map knows, the written shape) of a checkpoint tensor."""
    if name.endswith(".linear_attn.dt_bias"):
        return name.removesuffix(".dt_bias") + ".dt_proj.bias", shape
    if ".linear_attn.conv1d" in name:
        return name, tuple(d for d in shape if d != 1)
    return name, shape


def _reorder(t, dim: int, n_k: int, per_k: int, d: int):
    """V heads grouped by key head [G0_v0 … G0_v{r-1}, G1_v0 …] -> tiled [G0_v0, G1_v0, …]
    along `dim` (_LinearAttentionVReorderBase._reorder_v_heads)."""
    shape = list(t.shape)
    dim %= len(shape)
    t = t.reshape(*shape[:dim], n_k, per_k, d, *shape[dim + 1:])
    return t.transpose(dim, dim + 1).contiguous().reshape(shape)


def transform(cfg: dict, name: str, w):
    import torch

    n_k, n_v = cfg.get("linear_num_key_heads", 0), cfg.get("linear_num_value_heads", 0)
    if n_k and n_v and n_k != n_v and ".linear_attn." in name:
        dk, dv, per_k = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], n_v // n_k
        if ".in_proj_qkv." in name:                      # only the V rows
            qk = 2 * dk * n_k
            w = torch.cat([w[:qk], _reorder(w[qk:], 0, n_k, per_k, dv)], 0)
        elif ".in_proj_z." in name:
            w = _reorder(w, 0, n_k, per_k, dv)
        elif ".in_proj_b." in name or ".in_proj_a." in name:
            w = _reorder(w, 0, n_k, per_k, 1)
        elif name.endswith((".A_log", ".dt_bias")):
            w = _reorder(w.unsqueeze(-1), 0, n_k, per_k, 1).squeeze(-1)
        elif ".conv1d" in name:                          # only the V channels
            w, qk = w.squeeze(), 2 * dk * n_k
            w = torch.cat([w[:qk], _reorder(w[qk:], 0, n_k, per_k, dv)], 0)
        elif ".out_proj." in name:                       # V heads are its input columns
            w = _reorder(w, 1, n_k, per_k, dv)
    if name.endswith(".A_log"):
        return -torch.exp(w.float())
    if ".conv1d" in name:
        return w.squeeze()
    if name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
        return w.float() + 1
    return w


def add_metadata(w, cfg: dict, rope: dict, n_layers: int) -> None:
    """Qwen3NextModel / Qwen2MoeModel / _Qwen35MRopeMixin.set_gguf_parameters' keys."""
    w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])
    w.add_ssm_state_size(cfg["linear_key_head_dim"])
    w.add_ssm_group_count(cfg["linear_num_key_heads"])
    w.add_ssm_time_step_rank(cfg["linear_num_value_heads"])
    w.add_ssm_inner_size(cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"])
    # llama.cpp's key (LLM_KV_ATTENTION_RECURRENT_LAYERS), newer than gguf-py 0.19's constants
    w.add_array(f"{w.arch}.attention.recurrent_layers",
                [t == "linear_attention" for t in layer_types(cfg, n_layers)])
    w.add_full_attention_interval(cfg.get("full_attention_interval", 4))
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    w.add_rope_dimension_count(int(hd * rope.get("partial_rotary_factor", 0.25)))
    sections = list(rope.get("mrope_section") or DEFAULT_MROPE)
    w.add_rope_dimension_sections((sections + [0] * 4)[:4])
    if cfg.get("shared_expert_intermediate_size") is not None:
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])


def layer_types(cfg: dict, n_layers: int) -> list[str]:
    """config.json's layer_types, else transformers' default: every 4th layer full attention."""
    every = cfg.get("full_attention_interval", 4)
    return cfg.get("layer_types") or ["linear_attention" if (i + 1) % every else
                                      "full_attention" for i in range(n_layers)]
