"""Model stage: the base (embedded tiny, a local HF snapshot, or random weights) and the lane
on top of it (LoRA / QLoRA / full / DPO's LoRA policy). Heavy imports live inside functions.
"""
from __future__ import annotations

from pathlib import Path

from mens.errors import ConfigError

ASSETS = Path(__file__).resolve().parent / "assets"
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def weights_dir(rung) -> Path:
    """Where a rung's weights (and tokenizer) are; ConfigError (exit 2) before anything loads."""
    if rung.path:
        path = Path(rung.path)
        if not (path / "config.json").is_file():
            raise ConfigError(f"rung.path={rung.path} holds no config.json: point it at a Hugging "
                              f"Face model directory (config.json, tokenizer, safetensors).",
                              key="rung.path")
        return path
    if rung.tokenizer_bundled:
        path = ASSETS / rung.name
        if not (path / "config.json").is_file():
            raise ConfigError(f"the embedded {rung.name} rung is missing from {path}: rebuild it "
                              f"with `python recipes/tiny_base.py` or reinstall mens.", key="rung")
        return path
    from mens.weights import find_weights, missing_weights_message

    st = find_weights(rung.repo_id, rung.revision)
    if not st.present:
        raise ConfigError(missing_weights_message(st), key="rung")
    return Path(st.path)


def load_tokenizer(spec, notes: list[str]):
    from transformers import AutoTokenizer

    rung = spec.rung
    if rung.init == "random" and not rung.tokenizer_bundled and not rung.path:
        try:
            path = weights_dir(rung)
        except ConfigError:   # architecture only: borrow the tiny tokenizer's ids (< its vocab)
            notes.append(f"tokenizer: {rung.repo_id}'s tokenizer is absent; using the embedded "
                         f"tiny tokenizer (ids < 4096) for this random-weight run")
            path = ASSETS / "tiny"
    else:
        path = weights_dir(rung)
    return AutoTokenizer.from_pretrained(str(path))


def qwen3_config(rung):
    from transformers import Qwen3Config

    return Qwen3Config(
        hidden_size=rung.hidden_size, intermediate_size=rung.intermediate_size,
        num_hidden_layers=rung.num_hidden_layers, num_attention_heads=rung.num_attention_heads,
        num_key_value_heads=rung.num_key_value_heads, head_dim=rung.head_dim,
        vocab_size=rung.vocab_size, tie_word_embeddings=rung.tie_word_embeddings,
        max_position_embeddings=rung.max_position_embeddings, rope_theta=rung.rope_theta,
        rms_norm_eps=rung.rms_norm_eps)


def base_dtype(spec):
    """Frozen base weights in the lane's precision; full fine-tuning keeps fp32 masters."""
    import torch

    if spec.lane.kind == "full":
        return torch.float32
    return getattr(torch, DTYPES[spec.lane.precision])


def load_base(spec, attn: str = "sdpa"):
    """The base model, before any adapter. Seeded so random init is reproducible."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Qwen3ForCausalLM

    torch.manual_seed(spec.train.seed)
    dtype = base_dtype(spec)
    if spec.rung.init == "random":
        config = qwen3_config(spec.rung)
        config._attn_implementation = attn
        model = Qwen3ForCausalLM(config).to(dtype)
        if spec.lane.kind == "qlora":
            raise ConfigError("lane=qlora with rung.init=random is not supported: bitsandbytes "
                              "quantises weights as they load; use lane=lora for random weights.",
                              key="lane")
        return model
    kwargs = {"dtype": dtype, "attn_implementation": attn}
    if spec.lane.kind == "qlora":
        q = spec.lane.quantization
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type=q.type, bnb_4bit_use_double_quant=q.double_quant,
            bnb_4bit_compute_dtype=getattr(torch, DTYPES[spec.lane.precision]))
        kwargs["device_map"] = {"": _device(spec)}
        kwargs["dtype"] = getattr(torch, DTYPES[spec.lane.precision])
    return AutoModelForCausalLM.from_pretrained(str(weights_dir(spec.rung)), **kwargs)


def _device(spec) -> str:
    return {"cuda": "cuda:0", "mps": "mps", "cpu": "cpu"}[spec.hw.backend]


def apply_lane(model, spec, init_adapter: str | None = None):
    """LoRA/QLoRA/DPO: a PEFT adapter (fp32) on a frozen base; full: every weight trains."""
    import torch

    lane = spec.lane
    if lane.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if lane.kind == "full":
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
        model = get_peft_model(model, LoraConfig(
            r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
            target_modules=list(lora.targets), task_type="CAUSAL_LM"))
    for n, p in model.named_parameters():   # adapters train in fp32 whatever the base dtype
        if p.requires_grad and p.dtype != torch.float32:
            p.data = p.data.float()
    return model


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
