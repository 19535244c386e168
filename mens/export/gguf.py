"""GGUF files with gguf-py: the merged (or base) model, and the LoRA adapter.

Names and keys follow llama.cpp's converters (convert_hf_to_gguf.py, convert_lora_to_gguf.py):
the family's llama.cpp arch, tensor transforms and keys (mens/export/arch.py, from config.json's
model_type), tensor names from `gguf.get_tensor_name_map`, a gpt2-BPE tokenizer whose `pre` names
its split regex, 1-D tensors (norms) kept F32 at every type. Tensors stream: the header is
written from shapes alone (`add_tensor_info`), then each tensor is read, transformed for its
family, quantised by gguf-py and written before the next is read. K-quants (q4_k_m …) have no gguf-py quantiser: llama.cpp's own
(`llama_model_quantize`, via llama-cpp-python) makes them from a lossless GGUF.
Every file is written under a temp name and renamed into place when complete.
"""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

from mens.errors import ConfigError
from mens.export import arch

# gguf-py quantises these in numpy, bit-exact with ggml (gguf/quants.py)
NUMPY_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1")
# only llama.cpp's quantizer makes these (LlamaFileType names)
LLAMA_TYPES = {"q4_k_m": "MOSTLY_Q4_K_M", "q5_k_m": "MOSTLY_Q5_K_M", "q6_k": "MOSTLY_Q6_K"}
FILE_TYPES = {"f32": "ALL_F32", "f16": "MOSTLY_F16", "bf16": "MOSTLY_BF16", "q8_0": "MOSTLY_Q8_0",
              "q4_0": "MOSTLY_Q4_0", "q4_1": "MOSTLY_Q4_1", "q5_0": "MOSTLY_Q5_0",
              "q5_1": "MOSTLY_Q5_1", **LLAMA_TYPES}
LOSSLESS = {"bf16": "bf16", "fp16": "f16", "fp32": "f32"}   # HF dtype -> GGUF type that keeps it


@contextmanager
def atomic_path(final: Path):
    """Yield a temp path next to `final`; rename it into place only if the block succeeds."""
    tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextmanager
def scratch_path(path: Path):
    """A temp-named file that is always removed (an intermediate, never a final file)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


def _ggml_type(name: str):
    import gguf
    return {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
            "bf16": gguf.GGMLQuantizationType.BF16, "q8_0": gguf.GGMLQuantizationType.Q8_0,
            "q4_0": gguf.GGMLQuantizationType.Q4_0, "q4_1": gguf.GGMLQuantizationType.Q4_1,
            "q5_0": gguf.GGMLQuantizationType.Q5_0, "q5_1": gguf.GGMLQuantizationType.Q5_1}[name]


def _tied(cfg: dict, hf_dir: Path) -> bool:
    """Whether lm_head is the embedding: config.json, else the family row's default, which is
    the config class's (Gemma configs often leave it out and default to tied)."""
    if "tie_word_embeddings" in cfg:
        return bool(cfg["tie_word_embeddings"])
    return bool(arch.family_of(cfg, hf_dir).defaults["tie_word_embeddings"])


def tensor_plan(src, hf_dir: Path, qtype: str) -> list[tuple[tuple, str, tuple, object, object]]:
    """(hf source names, gguf name, shape, ggml type, make) per tensor: make(source tensors) is
    the family's regrouping (experts stacked or split, mens/export/experts.py) or None for one
    tensor as it is; the tied lm_head is not written; the family's extra tensors (Llama 3.1
    rope_freqs) come last with no sources."""
    import gguf

    from mens.export import experts

    src = arch.text_tensors(src, hf_dir)
    cfg = arch.load_config(hf_dir)
    fam = arch.family_of(cfg, hf_dir)
    arch.check_supported(fam, cfg, hf_dir)
    name_map = arch.name_map(fam, cfg)
    tied = _tied(cfg, hf_dir)
    plan = []
    for n, srcs, shape, make in experts.gguf_sources(fam.model_type, src.names, src.shapes):
        if n == "lm_head.weight" and tied:
            continue
        n, shape = arch.source(fam, n, shape)
        g = name_map.get_name(n, try_suffixes=(".weight", ".bias"))
        if g is None:
            raise ConfigError(f"{hf_dir}: tensor {n} has no GGUF name for llama.cpp's arch "
                              f"`{fam.gguf_arch}` ({fam.model_type}); mens exports the families' "
                              f"plain *ForCausalLM models only.", key="export.gguf")
        shape = tuple(shape)
        t = _ggml_type(qtype)
        if len(shape) < 2 or g.endswith("_norm.weight") or not g.endswith(".weight") \
                or ".ffn_gate_inp" in g or ".ssm_conv1d" in g:  # the converter's always-F32
            t = gguf.GGMLQuantizationType.F32   # norms, biases (2-D expert ones too), routers
        elif shape[-1] % gguf.GGML_QUANT_SIZES[t][0]:
            t = gguf.GGMLQuantizationType.F16   # rows not a block multiple: as the converters do
        plan.append((srcs, g, shape, t, make))
    for g, x in arch.extra_tensors(fam, cfg).items():
        plan.append(((), g, tuple(x.shape), gguf.GGMLQuantizationType.F32, None))
    return plan


def preflight(hf_dir: Path, adapter=None) -> list[str]:
    """Everything a GGUF export of hf_dir (and of `adapter` as a LoRA GGUF, when given) can
    refuse, checked before any file is written (exit 2 naming the cause: family, config,
    tokenizer kind, expert LoRA); returns notes for the manifest."""
    cfg = arch.load_config(hf_dir)
    fam = arch.family_of(cfg, hf_dir)
    arch.check_supported(fam, cfg, hf_dir)
    arch.tokenizer_pre(Path(hf_dir))
    if adapter is not None:
        check_adapter_gguf(adapter)
    return arch.notes(fam, cfg) + template_notes(hf_dir)


def template_notes(hf_dir: Path) -> list[str]:
    """What a server rendering the GGUF's template does differently from training: llama.cpp's
    server fills Llama 3.1's `date_string` with today's date (common/chat.cpp), where mens's
    training rendered the template's own default (tests/export/test_gguf_chat_template.py)."""
    import re

    from transformers import AutoTokenizer
    t = AutoTokenizer.from_pretrained(str(hf_dir)).chat_template
    text = t if isinstance(t, str) else "".join((t or {}).values())
    default = re.search(r'set date_string = "([^"]+)"', text)
    if not default:
        return []
    return [f"chat template: llama.cpp's server (--jinja) sets date_string to today's date, so "
            f"its prompts say \"Today Date: <today>\" where training saw \"{default.group(1)}\";"
            f" serve with --chat-template-kwargs '{{\"date_string\": \"{default.group(1)}\"}}' "
            f"for the framing the model was trained on"]


def _model_metadata(w, hf_dir: Path, qtype: str, name: str) -> None:
    import gguf

    cfg = arch.load_config(hf_dir)
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(_safe_name(name, hf_dir))
    arch.add_metadata(w, arch.family_of(cfg, hf_dir), cfg)
    w.add_file_type(getattr(gguf.LlamaFileType, FILE_TYPES[qtype]))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    add_tokenizer(w, hf_dir, cfg["vocab_size"])


def _safe_name(name: str, hf_dir: Path) -> str:
    """general.name, unless llama.cpp would fail to load the file for it: llama-vocab.cpp gives
    Phi-3's token attributes to any model whose name contains "phi3"/"phi-3" and looks up
    `</s>`, `<unk>`, `<s>`, `<|endoftext|>` (unordered_map::at: the load aborts) — which a
    byte-level BPE (Phi-4) vocab lacks. Then the name is written with "phi_3", and said."""
    low = name.lower()
    if "phi3" not in low and "phi-3" not in low:
        return name
    vocab = json.loads((Path(hf_dir) / "tokenizer.json").read_text())
    have = set(vocab.get("model", {}).get("vocab", {})) | \
        {a["content"] for a in vocab.get("added_tokens", [])}
    if {"</s>", "<unk>", "<s>", "<|endoftext|>"} <= have:
        return name
    import re
    safe = re.sub(r"(?i)phi-?3", "phi_3", name)
    print(f"mens: GGUF general.name `{safe}`, not `{name}`: llama.cpp fails to load a model "
          f"named phi3/phi-3 whose vocab lacks Phi-3's </s>, <unk>, <s>, <|endoftext|>")
    return safe


def add_tokenizer(w, hf_dir: Path, n_vocab: int) -> None:
    """gpt2 BPE tokens/types/merges, special ids and chat template, as convert_hf_to_gguf does
    (the chat template: the tokenizer's own, whole — gguf_chat_template)."""
    import gguf
    from transformers import AutoTokenizer

    hf_dir = Path(hf_dir)
    if not (hf_dir / "tokenizer.json").is_file():
        raise ConfigError(f"{hf_dir} has no tokenizer.json: a GGUF carries the tokenizer, so the "
                          f"model dir needs its fast (byte-level BPE) tokenizer.",
                          key="export.gguf")
    arch.tokenizer_pre(hf_dir)               # exit 2 (naming the kind) before gguf-py's assert
    vocab = gguf.BpeVocab(hf_dir)            # checks: byte-level BPE, no byte fallback
    tokens = [t for t, _, _ in vocab.bpe_tokens()] + list(vocab.added_tokens_list)
    types = [gguf.TokenType.NORMAL] * len(tokens)
    added = json.loads((hf_dir / "tokenizer.json").read_text()).get("added_tokens", [])
    for a in added:                          # special -> CONTROL (not rendered), else USER_DEFINED
        if a["id"] < len(tokens):
            tokens[a["id"]] = a["content"]
            types[a["id"]] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
    for i in range(len(tokens), n_vocab):    # the embedding may have more rows than the tokenizer
        tokens.append(f"[PAD{i}]")
        types.append(gguf.TokenType.UNUSED)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(arch.tokenizer_pre(hf_dir))   # the llama.cpp name of its split regex
    w.add_token_list(tokens)
    w.add_token_types(types)
    special = gguf.SpecialVocab(hf_dir, load_merges=True, n_vocab=len(tokens))
    tok = AutoTokenizer.from_pretrained(str(hf_dir))
    if "bos" not in special.add_special_token:   # add BOS exactly when the HF tokenizer does
        ids = tok("a").input_ids
        special.add_special_token["bos"] = len(ids) > 1 and ids[0] == tok.bos_token_id
    special.chat_template = gguf_chat_template(tok)
    special.add_to_gguf(w, quiet=True)


def gguf_chat_template(tok):
    """The chat template(s) the GGUF carries: exactly what transformers renders with — the whole
    template, its tool branches included (llama.cpp's --jinja renders tools with it, Ollama may
    prefer it), and named ones (a `tool_use` template) as tokenizer.chat_template.<name>. gguf-py
    alone reads tokenizer_config.json before chat_template.jinja, transformers the other way."""
    t = tok.chat_template
    if isinstance(t, dict):
        return [{"name": n, "template": x} for n, x in t.items()]
    return t


def write_model_gguf(src, hf_dir: Path, out: Path, qtype: str, name: str) -> Path:
    """A complete GGUF of `src` (a SafetensorsDir or MergedWeights) at type `qtype`, in the
    llama.cpp architecture of config.json's model_type (mens/export/arch.py)."""
    import gguf
    import numpy as np

    src = arch.text_tensors(src, hf_dir)      # a multimodal checkpoint: its text model
    plan = tensor_plan(src, hf_dir, qtype)
    cfg = arch.load_config(hf_dir)
    fam = arch.family_of(cfg, hf_dir)
    extra = arch.extra_tensors(fam, cfg)
    with atomic_path(out) as tmp:
        w = gguf.GGUFWriter(tmp, fam.gguf_arch)
        _model_metadata(w, hf_dir, qtype, name)
        for _, g, shape, t, _ in plan:        # header from shapes alone: nothing loaded yet
            byte_shape = gguf.quant_shape_to_byte_shape(shape, t)
            w.add_tensor_info(g, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)),
                              raw_dtype=t)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        from tqdm.auto import tqdm
        for srcs, g, _, t, make in tqdm(plan, desc=f"export {out.name}", unit="tensor",
                                        leave=False):
            if not srcs:
                x = extra[g]
            elif make is None:
                x = arch.transform(fam, cfg, srcs[0], src.get(srcs[0]))
            else:                             # one layer's experts at a time
                x = arch.transform(fam, cfg, g, make([src.get(n) for n in srcs])).contiguous()
            w.write_tensor_data(_convert(x, t))            # one tensor in memory at a time
        w.close()
    return out


def _convert(x, t):
    """A torch tensor -> the GGUF bytes of type t, converted in row chunks so that a large
    tensor (the 151936-row embedding) never exists in fp32 all at once."""
    import gguf
    import numpy as np
    import torch

    rows = x.reshape(-1, x.shape[-1])                       # [n_rows, row_len]
    byte_shape = gguf.quant_shape_to_byte_shape(tuple(rows.shape), t)
    out = np.empty(byte_shape, dtype=np.uint8)
    step = max(1, 2**22 // rows.shape[1])                  # ~16 MiB of fp32 per chunk
    for i in range(0, rows.shape[0], step):
        chunk = rows[i:i + step].to(torch.float32).numpy()
        out[i:i + step] = gguf.quants.quantize(chunk, t).view(np.uint8).reshape(len(chunk), -1)
    return out.reshape(gguf.quant_shape_to_byte_shape(tuple(x.shape), t))


def check_adapter_gguf(adapter) -> None:
    """A LoRA on the fused experts (PEFT target_parameters) has no GGUF adapter form: llama.cpp's
    convert_lora_to_gguf.py pairs only lora_A/lora_B of 2-D weights (it has no ParamWrapper
    branch: `experts.base_layer` maps to no tensor) and its loader expects 2-D lora_a/lora_b."""
    if adapter.experts:
        raise ConfigError(f"{adapter.path}: the adapter puts LoRA on the experts' fused weights "
                          f"({', '.join(sorted(adapter.experts)[:2])}, …; lane.lora.experts="
                          f"true), which llama.cpp's LoRA GGUF format cannot hold "
                          f"(convert_lora_to_gguf.py handles 2-D lora_A/lora_B pairs only). Set "
                          f"export.adapter_gguf=false and use the merged GGUF instead.",
                          key="export.adapter_gguf")


def write_adapter_gguf(adapter, hf_dir: Path, out: Path, name: str) -> Path:
    """LoRA adapter GGUF: general.type=adapter, adapter.lora.alpha (f32), <name>.lora_a/.lora_b."""
    import gguf
    import numpy as np

    check_adapter_gguf(adapter)
    cfg = arch.load_config(hf_dir)
    fam = arch.family_of(cfg, hf_dir)
    arch.check_supported(fam, cfg, hf_dir)     # an adapter of a base llama.cpp can't run
    name_map = arch.name_map(fam, cfg)
    with atomic_path(out) as tmp:
        w = gguf.GGUFWriter(tmp, fam.gguf_arch)     # llama.cpp requires the base's architecture
        w.add_type(gguf.GGUFType.ADAPTER)
        w.add_name(name)
        w.add_string(gguf.Keys.Adapter.TYPE, "lora")
        w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(adapter.alpha))
        for n, (a, b) in adapter.pairs.items():
            g = name_map.get_name(n, try_suffixes=(".weight",))
            if g is None or g.startswith(("token_embd", "output.")):
                raise ConfigError(f"{adapter.path}: a LoRA on {n} cannot be a GGUF adapter "
                                  f"(llama.cpp adapts the block matrices only); set "
                                  f"export.adapter_gguf=false and use the merged GGUF.",
                                  key="export.adapter_gguf")
            # PEFT's A [r, in] and B [out, r], permuted as the base's rows / columns are
            # (llama/mistral q/k, Qwen3.5's value heads); gguf-py reverses dims into ne
            a, b = arch.transform_lora(fam, cfg, n, a, b)
            w.add_tensor(f"{g}.lora_a", a.float().contiguous().numpy().astype(np.float32))
            w.add_tensor(f"{g}.lora_b", b.float().contiguous().numpy().astype(np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return out


def require_llama_cpp(qtype: str, key: str = "export.gguf"):
    """llama-cpp-python's module, or exit 2 saying how to get it (checked before any work)."""
    try:
        import llama_cpp
    except ImportError:
        raise ConfigError(f"{key}={qtype} needs llama.cpp's quantizer, from llama-cpp-python "
                          f"(`pip install llama-cpp-python==0.3.36`, builds llama.cpp in ~8 min); "
                          f"or choose a type gguf-py makes: {', '.join(NUMPY_TYPES)}.",
                          key=key) from None
    return llama_cpp


def llama_quantize(src_gguf: Path, out: Path, qtype: str) -> Path:
    """A K-quant through llama.cpp's own quantizer (llama-cpp-python's bindings)."""
    import logging

    import gguf

    llama_cpp = require_llama_cpp(qtype)
    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)   # no per-tensor log lines
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = int(getattr(gguf.LlamaFileType, LLAMA_TYPES[qtype]))
    params.nthread = os.cpu_count() or 1
    with atomic_path(out) as tmp:
        rc = llama_cpp.llama_model_quantize(str(src_gguf).encode(), str(tmp).encode(),
                                            llama_cpp.byref(params))
        if rc != 0 or not tmp.is_file():
            from mens.errors import RunFailed
            raise RunFailed(f"llama.cpp's quantizer returned {rc} for {qtype} from {src_gguf}.")
    return out
