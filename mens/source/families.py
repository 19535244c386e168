"""The model families mens can plan, load and export: one row per config.json `model_type`.

Pure data and arithmetic, no torch or transformers: the planner imports it. Each row says what
changes a family's parameter count (biases, q/k norms, norms per layer, tied head), how its
defaults fill a config.json that leaves a key out, and what the loader and exporter call it.
The defaults are transformers' own (its config classes, 5.x), so the planner's count equals
what `from_pretrained` builds; tests/source/test_families.py checks both against transformers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from mens.config.schema import LORA_TARGETS
from mens.errors import ConfigError

# Keys a config.json must name unless its family's row defaults them (Gemma's published
# config.json files lean on the class defaults: gemma-3-4b-it names neither heads nor vocab).
REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "vocab_size")
# Gemma 2 / Gemma 3 text config classes' architecture defaults (Gemma3TextConfig: vocab 262,208)
_GEMMA = {"hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
          "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
          "tie_word_embeddings": True}


@dataclass(frozen=True)
class Family:
    """Every per-family fact mens uses: what the planner counts, what the loader builds, which
    attention the trainer may use, and what the exporter writes for llama.cpp. Adding a family
    is one row here (plus, where llama.cpp's graph needs them, the export transforms in
    mens/export/arch.py that read the row's gguf_arch / permute_qk / norm_shift / swa_every)."""
    model_type: str
    config_class: str            # transformers config class
    causal_lm_class: str         # transformers *ForCausalLM class
    gguf_arch: str               # llama.cpp architecture name (GGUF general.architecture)
    qkv_bias: bool = False       # q/k/v projections carry biases (o_proj does not)
    # RMSNorm on queries and keys: "head" — over head_dim, shared by the heads (2 × head_dim:
    # Qwen3, Gemma 3); "proj" — over the whole q and k projections (heads·d + kv·d: OLMo 2)
    qk_norm: str = ""
    norms_per_layer: int = 2     # hidden-sized RMSNorms per decoder layer
    # the default LoRA targets: every linear layer of a decoder layer but a mixture of experts'
    # router, which PEFT's, TRL's and Unsloth's recipes leave frozen (lane.lora.router adds it)
    lora_targets: tuple = LORA_TARGETS
    # transformers' value when config.json omits the key (tie_word_embeddings: the tied-head
    # default). head_dim None: hidden // heads; num_key_value_heads None: = num_attention_heads.
    defaults: Mapping = field(default_factory=dict)
    # The attention implementation the family needs whatever was asked, and why.
    attn: str | None = None
    attn_reason: str = ""
    # Why packed rows cannot use per-record attention ("" when they can): the planner falls back
    # to the 4-D block mask and says this.
    no_per_record: str = ""
    window_every_layer: bool = False   # config.sliding_window reaches every layer (Mistral)
    softcap_logits: bool = False       # final logits soft-capped (a tanh over them: Gemma 2)
    # Export (llama.cpp's convert_hf_to_gguf.py for the family; mens/export/arch.py applies them)
    chat: str | None = None      # chat format of its instruct models (mens/export/modelfile.py)
    permute_qk: bool = False     # LlamaModel.permute on q/k (and on a LoRA's q/k lora_b)
    norm_shift: float = 0.0      # added to every *norm.weight (Gemma's (1 + w) RMSNorm)
    swa_every: int = 0           # llama.cpp's hard-coded pattern: every n-th layer full
    # config.layer_types mixes sliding and full layers: packed rows then carry one 4-D mask
    # per layer type (mens.train.attention.windowed), two where the planner counts one
    window_types: bool = False
    # Every linear layer a LoRA may target in this family (a lane's explicit targets outside
    # it are a ConfigError), and the default targets when the lane keeps mens's default list.
    linear: tuple = LORA_TARGETS
    # Mixture-of-experts: the fused 3-D expert weights (PEFT `target_parameters`, suffixes of
    # the parameter names) that lane.lora.experts=true adds; () for a dense family.
    experts: tuple = ()
    # Why packed rows cannot be trained at all ("" when they can): the planner turns packing
    # off for the family and pads each record alone, and says this.
    no_packing: str = ""
    # Config.json keys of the mixture-of-experts and linear-attention RungConfig fields, as data:
    # field → the keys tried in order (Mixtral and gpt-oss say num_local_experts, Qwen3-MoE
    # num_experts; Mixtral's and gpt-oss's expert width is their intermediate_size). Their
    # class defaults sit in `defaults` under the first key.
    keys: Mapping = field(default_factory=dict)
    o_bias: bool = False          # o_proj carries a bias too (gpt-oss: attention_bias on all four)
    sinks: bool = False           # one learned attention-sink logit per head and layer (gpt-oss)
    moe_biases: bool = False      # router and expert biases (gpt-oss: router.bias, *_proj_bias)
    router: str = "gate"          # a mixture of experts' router module (gpt-oss: router)
    gated_q: bool = False         # q_proj also makes a per-head output gate: 2 × heads·d (Qwen3.5)
    linear_attention: bool = False   # Gated DeltaNet layers by layer_types (Qwen3.5)


# RungConfig's architecture fields beyond the dense ones: 0 = dense / full attention only
MOE_FIELDS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
              "shared_expert_intermediate_size")
LINEAR_FIELDS = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                 "linear_value_head_dim", "linear_conv_kernel_dim")
_MOE_KEYS = {"num_experts": ("num_experts", "num_local_experts"),   # (transformers' to_dict)
             "num_experts_per_tok": ("num_experts_per_tok",),
             "moe_intermediate_size": ("moe_intermediate_size",)}
_LOCAL_EXPERTS = {"num_experts": ("num_local_experts", "num_experts"),
                  "num_experts_per_tok": ("num_experts_per_tok",),
                  "moe_intermediate_size": ("intermediate_size",)}
_LINEAR_KEYS = {k: (k,) for k in LINEAR_FIELDS}
# Qwen3.5's Gated DeltaNet class defaults (Qwen3_5TextConfig and Qwen3_5MoeTextConfig alike)
_DELTANET_DEFAULTS = dict(linear_num_key_heads=16, linear_num_value_heads=32,
                          linear_key_head_dim=128, linear_value_head_dim=128,
                          linear_conv_kernel_dim=4)


def _defaults(**kw):
    base = {"tie_word_embeddings": False, "head_dim": None, "num_key_value_heads": None,
            "rope_theta": 10_000.0, "rms_norm_eps": 1e-6}
    return {**base, **kw}


_GEMMA_EXPORT = dict(chat="gemma", norm_shift=1.0)
_ATTN = LORA_TARGETS[:4]                                   # q/k/v/o_proj
_EXPERTS = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")
_PHI3 = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
_DELTANET = ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj")
_QWEN35_PACKING = ("Qwen3.5's linear-attention (Gated DeltaNet) layers carry a recurrent state "
                   "along the row, which transformers' torch path does not reset at record "
                   "boundaries")
FAMILIES: dict[str, Family] = {f.model_type: f for f in (
    # Qwen2/2.5: biases on q/k/v only (hard-wired in Qwen2Attention, no attention_bias key)
    Family("qwen2", "Qwen2Config", "Qwen2ForCausalLM", "qwen2", qkv_bias=True, chat="chatml",
           defaults=_defaults(max_position_embeddings=32768, num_key_value_heads=32)),
    Family("qwen3", "Qwen3Config", "Qwen3ForCausalLM", "qwen3", qk_norm="head", chat="chatml",
           defaults=_defaults(max_position_embeddings=32768, head_dim=128,
                              num_key_value_heads=32)),
    Family("llama", "LlamaConfig", "LlamaForCausalLM", "llama", chat="llama3", permute_qk=True,
           defaults=_defaults(max_position_embeddings=2048)),
    # llama.cpp converts Mistral's dense models with its llama architecture
    Family("mistral", "MistralConfig", "MistralForCausalLM", "llama", chat="mistral",
           permute_qk=True, window_every_layer=True,
           no_per_record="Mistral may attend through a sliding window",
           defaults=_defaults(max_position_embeddings=131072, num_key_value_heads=8)),
    Family("gemma2", "Gemma2Config", "Gemma2ForCausalLM", "gemma2", norms_per_layer=4,
           defaults=_defaults(max_position_embeddings=8192, vocab_size=256000, **_GEMMA),
           attn="eager", attn_reason="Gemma 2 soft-caps attention logits, which only eager "
                                     "attention implements (transformers refuses sdpa for it)",
           no_per_record="Gemma 2 soft-caps attention logits", softcap_logits=True,
           swa_every=2, window_types=True, **_GEMMA_EXPORT),
    Family("gemma3_text", "Gemma3TextConfig", "Gemma3ForCausalLM", "gemma3", qk_norm="head",
           norms_per_layer=4,
           defaults=_defaults(max_position_embeddings=131072, vocab_size=262208,
                              rope_theta=1_000_000.0, **_GEMMA),
           no_per_record="Gemma 3 attends through sliding windows", swa_every=6,
           window_types=True,
           **_GEMMA_EXPORT),
    # OLMo 2: q/k RMSNorm over the whole projections, norms after attention and after the MLP
    # (post_attention / post_feedforward, no pre-norms); llama.cpp's `olmo2` is NeoX-rope (no
    # permutation). chat None: mens has no Go template of OLMo 2's own instruct format, so
    # the Modelfile tries every one and says so when none renders like the tokenizer's.
    Family("olmo2", "Olmo2Config", "Olmo2ForCausalLM", "olmo2", qk_norm="proj",
           defaults=_defaults(max_position_embeddings=2048, rms_norm_eps=1e-5)),
    # Mixtures of experts: transformers 5 fuses each layer's experts into two 3-D parameters
    # (experts.gate_up_proj, experts.down_proj), which LoRA reaches through PEFT's
    # target_parameters (lane.lora.experts); the router (`gate`, gpt-oss's `router`) is a
    # target lane.lora.router=true adds (mens.model.load.lora_plan reaches it as a parameter).
    Family("qwen3_moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM", "qwen3moe", qk_norm="head",
           chat="chatml", linear=(*_ATTN, "gate"), lora_targets=_ATTN,
           experts=_EXPERTS, keys=_MOE_KEYS,
           defaults=_defaults(max_position_embeddings=32768, head_dim=None,
                              num_key_value_heads=4, num_experts=128, num_experts_per_tok=8,
                              moe_intermediate_size=768)),
    # llama.cpp converts Mixtral with its llama architecture (experts as ffn_*_exps)
    Family("mixtral", "MixtralConfig", "MixtralForCausalLM", "llama", chat="mistral",
           permute_qk=True, window_every_layer=True, linear=(*_ATTN, "gate"),
           lora_targets=_ATTN, experts=_EXPERTS, keys=_LOCAL_EXPERTS,
           no_per_record="Mixtral may attend through a sliding window",
           defaults=_defaults(max_position_embeddings=131072, num_key_value_heads=8,
                              rope_theta=1_000_000.0, rms_norm_eps=1e-5,
                              num_local_experts=8, num_experts_per_tok=2)),
    # gpt-oss: biases on q/k/v/o, a sink logit per head, router and expert biases. Its router
    # (GptOssTopKRouter) is no nn.Linear: PEFT reaches its weight as a target parameter
    # (mens.model.load.lora_plan), with the same count as a Linear's LoRA
    Family("gpt_oss", "GptOssConfig", "GptOssForCausalLM", "gpt-oss", qkv_bias=True,
           o_bias=True, sinks=True, moe_biases=True, router="router", keys=_LOCAL_EXPERTS,
           linear=(*_ATTN, "router"), lora_targets=_ATTN, experts=_EXPERTS,
           attn="eager", attn_reason="gpt-oss adds learned attention sinks, which transformers "
                                     "implements in eager attention only (it refuses sdpa)",
           no_per_record="gpt-oss attends through sliding windows on alternate layers",
           window_types=True,
           defaults=_defaults(max_position_embeddings=131072, head_dim=64,
                              num_key_value_heads=8, rms_norm_eps=1e-5, rope_theta=150_000.0,
                              num_local_experts=128, num_experts_per_tok=4,
                              attention_bias=True)),
    # Phi-3 and Phi-4: fused q/k/v (qkv_proj) and gate/up (gate_up_proj) projections
    Family("phi3", "Phi3Config", "Phi3ForCausalLM", "phi3", linear=_PHI3, lora_targets=_PHI3,
           chat="phi3",
           defaults=_defaults(max_position_embeddings=4096, rms_norm_eps=1e-5)),
    # Qwen3.5 (published as a multimodal wrapper, model_type qwen3_5[_moe]): Gated DeltaNet
    # linear-attention layers beside gated full attention; its MoE adds a shared expert
    # (gate/up/down_proj: LoRA targets); its router `gate` is no nn.Linear: a target parameter
    Family("qwen3_5_text", "Qwen3_5TextConfig", "Qwen3_5ForCausalLM", "qwen35",
           qk_norm="head", chat="chatml", linear=(*LORA_TARGETS, *_DELTANET),
           lora_targets=(*LORA_TARGETS, *_DELTANET), no_packing=_QWEN35_PACKING,
           gated_q=True, linear_attention=True, keys=_LINEAR_KEYS,
           defaults=_defaults(max_position_embeddings=32768, head_dim=256,
                              num_key_value_heads=4, **_DELTANET_DEFAULTS)),
    Family("qwen3_5_moe_text", "Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", "qwen35moe",
           qk_norm="head", chat="chatml", linear=(*LORA_TARGETS, *_DELTANET, "gate"),
           lora_targets=(*LORA_TARGETS, *_DELTANET), experts=_EXPERTS,
           no_packing=_QWEN35_PACKING, gated_q=True, linear_attention=True,
           keys={**_MOE_KEYS, "shared_expert_intermediate_size":
                 ("shared_expert_intermediate_size",), **_LINEAR_KEYS},
           defaults=_defaults(max_position_embeddings=32768, head_dim=256,
                              num_key_value_heads=2, num_experts=256, num_experts_per_tok=8,
                              moe_intermediate_size=512, shared_expert_intermediate_size=512,
                              **_DELTANET_DEFAULTS)),
)}
# The family of a rung or record written before rungs named one (Qwen3, the only family then).
DEFAULT_FAMILY = "qwen3"
# model_types outside FAMILIES whose config.sliding_window reaches every layer too (the
# trainer's packed-attention check reads any transformers config, not only mens's families).
WINDOW_EVERY_LAYER = {"mixtral", *(f.model_type for f in FAMILIES.values()
                                   if f.window_every_layer)}
# config.json model_types that wrap a supported text model in `text_config`
WRAPPERS = {"gemma3": "gemma3_text", "qwen3_5": "qwen3_5_text",
            "qwen3_5_moe": "qwen3_5_moe_text"}
SUPPORTED = ", ".join([*FAMILIES, *(f"{w} (its text_config)" for w in WRAPPERS)])


def family(name: str, source: str = "rung.family") -> Family:
    """The row of a model_type; ConfigError naming `source` and the supported ones."""
    name = WRAPPERS.get(name, name)
    if name not in FAMILIES:
        raise ConfigError(f"{source}: model_type {name!r} is not a family mens supports; "
                          f"supported: {SUPPORTED}. Pick a model of one of these families.",
                          key="rung.family")
    return FAMILIES[name]


def lora_targets(fam: Family, targets, router: bool = False,
                 source: str = "lane.lora.targets") -> tuple:
    """The LoRA targets a lane gets on this family: the family's defaults when the lane keeps
    mens's default list (Phi-3 has no q_proj: its qkv_proj is fused), else the lane's own,
    each of which must be a linear layer of the family (ConfigError naming the ones there are);
    with `router` (lane.lora.router), a mixture of experts' router too (ConfigError on a dense
    family). A list that names the router adapts it as well: whether it is adapted is whether
    the result holds fam.router (router_adapted)."""
    targets = tuple(targets)
    if targets != LORA_TARGETS:
        bad = [t for t in targets if t not in fam.linear]
        if bad:
            raise ConfigError(f"{source}: {bad} are not linear layers of a {fam.model_type} "
                              f"model; its layers are {list(fam.linear)}. Name targets among "
                              f"these.", key="lane.lora.targets")
    out = fam.lora_targets if targets == LORA_TARGETS else targets
    if router and not fam.experts:
        raise ConfigError(f"lane.lora.router=true: a {fam.model_type} model is dense, it has no "
                          f"router to adapt. Set lane.lora.router=false (or pick a "
                          f"mixture-of-experts model: qwen3_moe, mixtral, gpt_oss, "
                          f"qwen3_5_moe).", key="lane.lora.router")
    return (*out, fam.router) if router and fam.router not in out else out


def router_adapted(fam: Family, targets) -> bool:
    """Whether resolved LoRA targets (lora_targets) adapt this family's router."""
    return bool(fam.experts) and fam.router in tuple(targets)


def text_config(config: Mapping, source: str, notes: list[str] | None = None) -> Mapping:
    """The text model's part of a config.json: itself, or a multimodal wrapper's text_config."""
    mt = config.get("model_type")
    if mt in WRAPPERS:
        inner = config.get("text_config")
        if not isinstance(inner, Mapping):
            raise ConfigError(f"{source}: model_type {mt!r} has no text_config object; a "
                              f"{mt} config.json holds its text model there.", key="rung")
        if notes is not None:
            notes.append(f"{source}: model_type {mt} is multimodal; mens plans and trains its "
                         f"text model ({WRAPPERS[mt]}) from text_config — the vision tower is "
                         f"not counted")
        return {"model_type": WRAPPERS[mt], **inner}
    return config


def _rope_theta(config: Mapping, default: float) -> float:
    """rope_theta (transformers 4.x config.json) or rope_parameters.rope_theta (5.x); Gemma 3
    keeps one per layer type in 5.x — the full-attention layers' is the model's rope_theta."""
    if config.get("rope_theta") is not None:
        return float(config["rope_theta"])
    rp = config.get("rope_parameters") or {}
    if rp.get("rope_theta") is not None:
        return float(rp["rope_theta"])
    full = rp.get("full_attention") or {}
    return float(full.get("rope_theta", default))


def rung_fields(config: Mapping, source: str, notes: list[str] | None = None) -> dict:
    """The RungConfig architecture fields (family, hidden_size, …, rms_norm_eps) of a
    config.json dict. `source` names the file in errors. Raises ConfigError for an unsupported
    model_type, a missing required key, or a bias the family's count cannot express."""
    config = text_config(config, source, notes)
    mt = config.get("model_type")
    if mt is None:
        raise ConfigError(f"{source} has no model_type: it is not a Hugging Face model "
                          f"config.json (supported: {SUPPORTED}).", key="rung")
    fam = family(mt, source)
    d = fam.defaults

    def get(key):
        v = config.get(key)
        return d.get(key) if v is None else v

    def keyed(name):   # a MoE / linear-attention field by the row's config.json keys
        for k in fam.keys.get(name, ()):
            if config.get(k) is not None:
                return config[k]
        first = fam.keys.get(name, (None,))[0]
        return d.get(first, 0) if first else 0

    experts = int(keyed("num_experts")) if fam.experts else 0
    for key in REQUIRED:
        # a MoE model without a dense MLP (Qwen3.5-MoE) names only its experts' width
        if key == "intermediate_size" and experts and get(key) is None:
            continue
        if get(key) is None:
            raise ConfigError(f"{source} has no {key!r}: a {mt} config.json needs it to "
                              f"size the model; check the file (or its text_config).", key="rung")
    # Llama, Qwen3, Gemma and OLMo 2 can switch on biases; Arch counts none for them
    for key in ("attention_bias", "mlp_bias"):
        if config.get(key) and not (fam.qkv_bias and key == "attention_bias"):
            raise ConfigError(f"{source} sets {key}: true; mens supports {mt} models without "
                              f"that bias only (its plan would miss those parameters).",
                              key="rung")
    if "attention_bias" in d and not get("attention_bias"):   # gpt-oss's switch, default on
        raise ConfigError(f"{source} sets attention_bias: false; mens supports {mt} models "
                          f"with their q/k/v/o biases only (the plan counts them).", key="rung")
    _check_sparse_layers(config, source, mt)

    heads, hidden = int(get("num_attention_heads")), int(get("hidden_size"))
    head_dim = get("head_dim")
    kv = get("num_key_value_heads")
    layers = int(get("num_hidden_layers"))
    moe = {f: int(keyed(f)) if experts else 0 for f in MOE_FIELDS}
    moe["num_experts"] = experts
    inter = get("intermediate_size")
    return {
        "family": fam.model_type,
        "hidden_size": hidden,
        "intermediate_size": int(moe["moe_intermediate_size"] if inter is None else inter),
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": int(heads if kv is None else kv),
        "head_dim": int(hidden // heads if head_dim is None else head_dim),
        "vocab_size": int(get("vocab_size")),
        "tie_word_embeddings": bool(get("tie_word_embeddings")),
        "max_position_embeddings": int(get("max_position_embeddings")),
        "rope_theta": _rope_theta(config, d["rope_theta"]),
        "rms_norm_eps": float(get("rms_norm_eps")),
        **moe,
        "linear_attention_layers": _linear_layers(config, layers, source)
        if fam.linear_attention else 0,
        **{f: int(keyed(f)) if fam.linear_attention else 0 for f in LINEAR_FIELDS},
    }


def _check_sparse_layers(config: Mapping, source: str, mt: str) -> None:
    """Qwen3-MoE can keep some layers dense (mlp_only_layers, decoder_sparse_step); every
    published Qwen3-MoE model has experts in every layer, which is what the plan counts."""
    step, dense = config.get("decoder_sparse_step"), config.get("mlp_only_layers")
    if step not in (None, 1) or dense:
        raise ConfigError(f"{source} sets decoder_sparse_step={step} / mlp_only_layers="
                          f"{dense}: mens plans {mt} models with experts in every layer only "
                          f"(decoder_sparse_step 1, mlp_only_layers []).", key="rung")


def _linear_layers(config: Mapping, layers: int, source: str) -> int:
    """How many layers are linear attention: layer_types as written, else transformers' own
    derivation from full_attention_interval (every n-th layer full attention; n = 4)."""
    types = config.get("layer_types")
    if types is None:
        n = int(config.get("full_attention_interval") or 4)
        return sum(1 for i in range(layers) if (i + 1) % n)
    if len(types) != layers or set(types) - {"linear_attention", "full_attention"}:
        raise ConfigError(f"{source}: layer_types must name linear_attention or "
                          f"full_attention for each of its {layers} layers.", key="rung")
    return types.count("linear_attention")


def config_kwargs(rung: Mapping) -> dict:
    """The config.json keys of a rung's MoE and linear-attention fields (the inverse of
    rung_fields for them), for building a random model from rung fields alone: each field under
    its row's first key; Qwen3.5's layer_types with its full-attention layers where transformers'
    interval of 4 puts them when the count agrees, else last."""
    fam = family(rung.get("family") or DEFAULT_FAMILY)
    out = {fam.keys[f][0]: rung[f] for f in (*MOE_FIELDS, *LINEAR_FIELDS)
           if f in fam.keys and rung.get(f)}
    if fam.linear_attention and rung.get("num_hidden_layers"):
        layers, linear = rung["num_hidden_layers"], rung.get("linear_attention_layers", 0)
        types = ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(layers)]
        if types.count("linear_attention") != linear:
            types = ["linear_attention"] * linear + ["full_attention"] * (layers - linear)
        out["layer_types"] = types
    return out


def read_config(path, notes: list[str] | None = None) -> dict:
    """rung_fields of a config.json file (or a model directory holding one)."""
    import json
    from pathlib import Path

    p = Path(path)
    p = p / "config.json" if p.is_dir() else p
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{p} does not exist: point rung.path at a Hugging Face model "
                          f"directory (with config.json).", key="rung.path") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"{p} is not readable JSON ({e}).", key="rung.path") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p} is not a JSON object.", key="rung.path")
    return rung_fields(data, str(p), notes)
