"""The GGUF transforms keyed by a family's row (mens.source.families: gguf_arch, permute_qk,
norm_shift, swa_every): tensor transforms, metadata, refusals, tokenizer `pre`.

Each follows what llama.cpp's own converter (convert_hf_to_gguf.py) does for the family:

- qwen2 / qwen3: names from gguf-py's map as they are (Qwen2 keeps its q/k/v biases).
- llama / mistral: arch `llama` (the converter registers MistralForCausalLM under LlamaModel);
  q_proj/k_proj rows are permuted (`LlamaModel.permute`: per head, the interleaved rotary pairs
  of HF's rotate_half layout become llama.cpp's adjacent pairs), and a LoRA's lora_b of q/k gets
  the same row permutation (convert_lora_to_gguf runs the model class's modify_tensors on the
  LoRA pair, whose permute acts on B's rows). Llama 3.1 rope scaling becomes a `rope_freqs`
  tensor (LlamaModel.generate_extra_tensors).
- gemma2 / gemma3 (`gemma3_text`): every `*norm.weight` + 1 (Gemma's RMSNorm computes (1 + w));
  the sqrt(hidden) embedding scale is applied by llama.cpp itself; the softcapping and sliding
  window keys; the embedding is tied (no `output` tensor).
- olmo2: names from gguf-py's map as they are (q/k norms, post-attention / post-feedforward
  norms); llama.cpp's `olmo2` graph is NeoX-rope, so no permutation (Olmo2Model has no
  modify_tensors).
- qwen3_moe / mixtral / qwen3_5_moe / gpt_oss: experts regrouped as mens/export/experts.py says
  (stacked per layer into ffn_{gate,up,down}_exps; gpt-oss's fused ones split and transposed),
  the router as ffn_gate_inp (F32), the expert keys TextModel writes; Mixtral is arch `llama`.
  llama.cpp's qwen3moe always renormalises the top-k weights and has no dense layers: a config
  with norm_topk_prob false or mlp_only_layers is refused.
- phi3: fused qkv_proj / gate_up_proj as attn_qkv / ffn_up (llama.cpp splits them), the original
  context, rotary dims and sliding-window keys of Phi3MiniModel (llama.cpp turns the window off:
  noted).
- gpt_oss: attention sinks, biases, yarn rope, window on even layers (GptOssModel); experts at the
  export type, not MXFP4 (GPT_OSS_NOTE says why).
- qwen3_5_text / qwen3_5_moe_text: mens/export/qwen35.py (Gated DeltaNet transforms).
llama.cpp hard-codes some Gemma facts instead of reading them (the query scale 1/sqrt(head_dim),
the sliding/full layer pattern): a config that differs is refused, not exported wrong.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from mens.errors import ConfigError
from mens.export import qwen35
from mens.source.families import FAMILIES, Family


# Split regexes of byte-level BPE tokenizers -> llama.cpp's `tokenizer.ggml.pre` that applies the
# same regex (llama-vocab.cpp). The converter finds `pre` by hashing a probe's token ids; a
# tokenizer's own regex names it directly, independent of the model family.
QWEN2_PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
             r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
LLAMA3_PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
              r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
PRE = {QWEN2_PAT: "qwen2", LLAMA3_PAT: "llama-bpe"}
IGNORE_MERGES = {"llama-bpe"}     # llama.cpp sets ignore_merges for these pre types


# Families llama.cpp loads but whose converter transforms mens does not write yet.
UNWRITTEN: dict[str, str] = {}
# gpt-oss's published experts are MXFP4; a merged LoRA is not.
GPT_OSS_NOTE = ("gpt-oss: the experts are written at the export type, not in the published "
                "MXFP4: a merged LoRA moves them off MXFP4's grid (W + BA), so re-quantising "
                "would round every expert weight again and llama.cpp would no longer decode like "
                "the merged model the export is verified against; llama.cpp's converter keeps "
                "MXFP4 only by copying an unmodified checkpoint's blocks. `llama-quantize` with "
                "type MXFP4_MOE makes an MXFP4 file from this GGUF where its size matters more")


def load_config(hf_dir: Path) -> dict:
    """config.json — of the text model, for a multimodal checkpoint (Qwen3.5, Gemma 3): its
    text_config under the text model's model_type, which is what the GGUF holds (llama.cpp's
    converter writes the vision tower as a separate --mmproj file)."""
    from mens.source.families import text_config
    return dict(text_config(json.loads((Path(hf_dir) / "config.json").read_text()),
                            str(Path(hf_dir) / "config.json")))


class TextTensors:
    """A multimodal checkpoint's text model as a tensor source: names as the text model's
    *ForCausalLM has them (model.language_model.* → model.*), the vision tower and any
    multi-token-prediction head left out; get() reads the checkpoint's own tensor."""

    def __init__(self, src):
        from mens.export.experts import model_name
        self.src = src
        self.orig = {model_name("", n): n for n in src.names
                     if model_name("", n) != n or n.startswith("lm_head.")}
        self.names = list(self.orig)
        self.shapes = {n: src.shapes[o] for n, o in self.orig.items()}

    def get(self, name: str):
        return self.src.get(self.orig[name])


def text_tensors(src, hf_dir: Path):
    """`src` itself, or its text model's TextTensors when hf_dir holds a multimodal checkpoint."""
    from mens.source.families import WRAPPERS
    raw = json.loads((Path(hf_dir) / "config.json").read_text())
    return TextTensors(src) if raw.get("model_type") in WRAPPERS and \
        not isinstance(src, TextTensors) else src


def family_of(cfg: dict, where) -> Family:
    fam = FAMILIES.get(cfg.get("model_type"))
    if fam is None:
        raise ConfigError(f"{where}: model_type `{cfg.get('model_type')}` has no GGUF export in "
                          f"mens; it exports {', '.join(FAMILIES)} (config.json's model_type).",
                          key="export.gguf")
    return fam


def gguf_arch(fam: Family):
    import gguf
    return next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == fam.gguf_arch)


def name_map(fam: Family, cfg: dict):
    import gguf
    return gguf.get_tensor_name_map(gguf_arch(fam), cfg["num_hidden_layers"])


def head_dim(cfg: dict) -> int:
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def _rope(cfg: dict, layer: str = "full_attention") -> dict:
    """transformers 5 keeps RoPE in rope_parameters (per layer type for Gemma 3); older configs
    in rope_theta / rope_scaling."""
    rp = cfg.get("rope_parameters") or {}
    if isinstance(rp.get(layer), dict):
        rp = rp[layer]
    elif isinstance(rp.get("full_attention"), dict):    # nested, but not for this layer type
        rp = {}
    out = dict(cfg.get("rope_scaling") or {})
    out.update(rp)
    out.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    return out


def permute(w, n_head: int):
    """LlamaModel.permute: rows (head, 2, half) -> (head, half, 2), for weights and lora_b."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2) \
        .reshape(w.shape)


def transform(fam: Family, cfg: dict, name: str, w):
    """A HF tensor as llama.cpp expects it (TextModel.modify_tensors of the family)."""
    if fam.gguf_arch in qwen35.ARCHS:
        return qwen35.transform(cfg, name, w)
    if fam.permute_qk and name.endswith(("q_proj.weight", "q_proj.bias")):
        w = permute(w, cfg["num_attention_heads"])
    elif fam.permute_qk and name.endswith(("k_proj.weight", "k_proj.bias")):
        w = permute(w, cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
    if fam.norm_shift and name.endswith("norm.weight"):
        w = w.float() + fam.norm_shift
    return w


def source(fam: Family, name: str, shape: tuple) -> tuple[str, tuple]:
    """(the name gguf-py's map knows, the shape written) of a checkpoint tensor: renamed or
    squeezed where the family's converter does (Qwen3.5's dt_bias, conv1d)."""
    return qwen35.source(name, shape) if fam.gguf_arch in qwen35.ARCHS else (name, shape)


def transform_lora(fam: Family, cfg: dict, name: str, a, b):
    """PEFT's A [r, in] and B [out, r] of a target: the base's row permutations apply to B (q/k
    of llama / mistral; Qwen3.5's value heads in in_proj_*), its column ones to A (Qwen3.5's
    out_proj), as convert_lora_to_gguf runs modify_tensors on the pair."""
    if fam.gguf_arch in qwen35.ARCHS and ".linear_attn." in name:
        if ".out_proj." in name:
            return qwen35.transform(cfg, name, a), b
        return a, qwen35.transform(cfg, name, b)
    if name.endswith(("q_proj.weight", "k_proj.weight")):
        return a, transform(fam, cfg, name, b)
    return a, b


def extra_tensors(fam: Family, cfg: dict) -> dict:
    """{gguf name: fp32 tensor} written besides the HF tensors: Llama 3.1's rope_freqs."""
    import torch

    rp = _rope(cfg)
    if fam.gguf_arch != "llama" or str(rp.get("rope_type", "")).lower() != "llama3":
        return {}
    dim, base = head_dim(cfg), rp["rope_theta"]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, lo, hi = rp.get("factor", 8.0), rp.get("low_freq_factor", 1.0), \
        rp.get("high_freq_factor", 4.0)
    old = rp.get("original_max_position_embeddings",
                 cfg.get("original_max_position_embeddings", 8192))
    out = []
    for f in freqs.tolist():           # as LlamaModel.generate_extra_tensors, factor per pair
        wavelen = 2 * math.pi / f
        if wavelen < old / hi:
            out.append(1.0)
        elif wavelen > old / lo:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return {"rope_freqs.weight": torch.tensor(out, dtype=torch.float32)}


def check_supported(fam: Family, cfg: dict, where) -> None:
    """Refuse what llama.cpp would compute differently from transformers for this family."""
    def refuse(what: str):
        raise ConfigError(f"{where}: {what}; llama.cpp's `{fam.gguf_arch}` cannot run it as "
                          f"transformers does, so mens does not write a GGUF of it (set "
                          f"export.gguf=[] and keep the merged HF dir).", key="export.gguf")

    if fam.model_type in UNWRITTEN:
        raise ConfigError(f"{where}: {fam.model_type}: {UNWRITTEN[fam.model_type]}; set "
                          f"export.gguf=[] and keep the merged HF dir, or convert that dir with "
                          f"llama.cpp's convert_hf_to_gguf.py.", key="export.gguf")
    rtype = str(_rope(cfg).get("rope_type") or "default").lower()
    if rtype not in ("default", "linear") and not (rtype == "llama3" and fam.gguf_arch == "llama") \
            and not (rtype == "yarn" and fam.gguf_arch == "gpt-oss"):
        refuse(f"rope_type `{rtype}`")
    if fam.gguf_arch == "qwen3moe":      # llama.cpp's qwen3moe graph: every layer MoE, top-k
        if not cfg.get("norm_topk_prob", False):      # weights always renormalised
            refuse("norm_topk_prob false (llama.cpp renormalises the top-k routing weights)")
        if cfg.get("mlp_only_layers") or cfg.get("decoder_sparse_step", 1) != 1:
            refuse("dense MLP layers among the MoE ones (mlp_only_layers / "
                   "decoder_sparse_step)")
    if fam.gguf_arch == "gpt-oss":
        n = cfg["num_hidden_layers"]
        want = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
        if cfg.get("layer_types") and cfg["layer_types"] != want:
            refuse(f"layer_types {cfg['layer_types']} (llama.cpp assumes sliding, full, "
                   f"sliding, … from layer 0)")
    if fam.gguf_arch in ("gemma2", "gemma3"):
        hd, scalar = head_dim(cfg), cfg.get("query_pre_attn_scalar", head_dim(cfg))
        if scalar != hd:   # llama.cpp scales queries by 1/sqrt(head_dim) (27B: n_embd/n_head)
            refuse(f"query_pre_attn_scalar {scalar} != head_dim {hd}")
        n, k = cfg["num_hidden_layers"], fam.swa_every
        want = ["sliding_attention" if (i + 1) % k else "full_attention" for i in range(n)]
        if cfg.get("layer_types") and cfg["layer_types"] != want:
            refuse(f"layer_types {cfg['layer_types']} (llama.cpp assumes every {k}-th layer "
                   f"full, the others sliding)")
        if fam.gguf_arch == "gemma3" and cfg.get("attn_logit_softcapping"):
            refuse("attn_logit_softcapping on Gemma 3")
        if fam.gguf_arch == "gemma2":    # llama.cpp's gemma2 graph always softcaps both
            off = [k for k in ("attn_logit_softcapping", "final_logit_softcapping")
                   if not cfg.get(k)]
            if off:
                refuse(f"{' and '.join(off)} off (null)")


def notes(fam: Family, cfg: dict) -> list[str]:
    """What the GGUF computes differently where it is not refused: said in the manifest."""
    out = []
    if fam.gguf_arch == "phi3" and cfg.get("sliding_window"):
        out.append(f"phi3: llama.cpp disables Phi-3's sliding window ({cfg['sliding_window']} "
                   f"tokens; llama.cpp PR 13676): outputs equal transformers' up to that "
                   f"context length only")
    if fam.gguf_arch == "gpt-oss":
        out.append(GPT_OSS_NOTE)
        if _rope(cfg).get("truncate", True) is False:
            out.append("gpt-oss: config.json's yarn rope says truncate=false, but llama.cpp "
                       "rounds yarn's correction range to whole dimensions (truncate=true, "
                       "ggml_rope_yarn_corr_dims): its logits differ from transformers' (~1e-2 "
                       "on a tiny model), so greedy decodes may part where tokens are close")
    if fam.window_every_layer and cfg.get("sliding_window"):
        out.append(f"{fam.model_type}: llama.cpp runs it as arch `llama` without the sliding "
                   f"window ({cfg['sliding_window']} tokens): outputs equal transformers' up to "
                   f"that context length only")
    if fam.gguf_arch in ("qwen2", "qwen3") and cfg.get("use_sliding_window"):
        out.append(f"{fam.model_type}: use_sliding_window is on in config.json but llama.cpp's "
                   f"`{fam.gguf_arch}` attends to the whole context")
    return out


def add_metadata(w, fam: Family, cfg: dict) -> None:
    """The hyper-parameter keys TextModel.set_gguf_parameters and the family class write."""
    hd = head_dim(cfg)
    rope = _rope(cfg)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(float(rope["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    if str(rope.get("rope_type", "")).lower() == "linear":
        import gguf
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(rope["factor"]))
    if fam.gguf_arch == "llama":
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(hd)
    if fam.experts:                      # TextModel.set_gguf_parameters' expert keys
        w.add_expert_count(cfg.get("num_local_experts") or cfg["num_experts"])
        w.add_expert_used_count(cfg["num_experts_per_tok"])
    if fam.gguf_arch in ("qwen3moe", "qwen35moe"):          # Qwen2MoeModel
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if fam.gguf_arch == "gpt-oss":                          # GptOssModel
        w.add_sliding_window(cfg["sliding_window"])
        w.add_expert_feed_forward_length(cfg["intermediate_size"])
        import gguf
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(float(rope["factor"]))
        w.add_rope_scaling_orig_ctx_len(int(rope["original_max_position_embeddings"]))
        for k, add in (("beta_fast", w.add_rope_scaling_yarn_beta_fast),
                       ("beta_slow", w.add_rope_scaling_yarn_beta_slow)):
            if rope.get(k) is not None:
                add(float(rope[k]))
    if fam.gguf_arch in qwen35.ARCHS:
        qwen35.add_metadata(w, cfg, rope, cfg["num_hidden_layers"])
    if fam.gguf_arch == "phi3":                             # Phi3MiniModel
        w.add_rope_scaling_orig_ctx_len(int(rope.get("original_max_position_embeddings") or
                                            cfg.get("original_max_position_embeddings") or
                                            cfg["max_position_embeddings"]))
        part = rope.get("partial_rotary_factor", 1.0)
        w.add_rope_dimension_count(int(part * cfg["hidden_size"]) // cfg["num_attention_heads"])
        w.add_sliding_window(cfg.get("sliding_window") or 0)   # 0: Phi-4, no window
    if fam.gguf_arch == "gemma2":
        w.add_attn_logit_softcapping(float(cfg["attn_logit_softcapping"]))
        w.add_final_logit_softcapping(float(cfg["final_logit_softcapping"]))
        w.add_sliding_window(cfg["sliding_window"])
    if fam.gguf_arch == "gemma3":
        local = _rope(cfg, "sliding_attention").get("rope_theta", cfg.get("rope_local_base_freq"))
        if local is not None:
            w.add_rope_freq_base_swa(float(local))
        if cfg.get("final_logit_softcapping"):
            w.add_final_logit_softcapping(float(cfg["final_logit_softcapping"]))
        if cfg.get("sliding_window_pattern", 6) != 1:
            w.add_sliding_window(cfg["sliding_window"])


def tokenizer_pre(hf_dir: Path) -> str:
    """llama.cpp's `pre` for the tokenizer's split regex; exit 2 for a kind mens can't write."""
    tj = json.loads((Path(hf_dir) / "tokenizer.json").read_text())
    model, pt = tj.get("model") or {}, tj.get("pre_tokenizer") or {}
    if model.get("type") != "BPE" or model.get("byte_fallback"):
        kind = "sentencepiece-style (byte-fallback BPE)" if model.get("byte_fallback") else \
            f"{model.get('type')}"
        raise ConfigError(f"{hf_dir}/tokenizer.json is a {kind} tokenizer: GGUF stores it as "
                          f"tokenizer.ggml.model=llama with scores and types, which mens does "
                          f"not write yet; mens exports byte-level BPE (gpt2) tokenizers only. "
                          f"Convert this model with llama.cpp's convert_hf_to_gguf.py instead.",
                          key="export.gguf")
    parts = pt.get("pretokenizers", [pt]) if pt.get("type") == "Sequence" else [pt]
    regex = [p["pattern"].get("Regex") for p in parts if p.get("type") == "Split"]
    if not regex and any(p.get("type") == "ByteLevel" and p.get("use_regex", True)
                         for p in parts):
        return "gpt-2"                      # ByteLevel's own GPT-2 regex
    pre = PRE.get(regex[0]) if len(regex) == 1 else None
    if pre is None:
        raise ConfigError(f"{hf_dir}/tokenizer.json splits text with {regex or parts}, a "
                          f"pre-tokenizer mens cannot name for llama.cpp (it knows Qwen2's and "
                          f"Llama 3's regexes); a wrong `pre` would tokenize differently.",
                          key="export.gguf")
    if pre in IGNORE_MERGES and not model.get("ignore_merges"):
        raise ConfigError(f"{hf_dir}/tokenizer.json has Llama 3's regex but ignore_merges=false, "
                          f"while llama.cpp's `{pre}` ignores merges for whole-word tokens: the "
                          f"two would tokenize differently.", key="export.gguf")
    return pre
