"""A GGUF source's weights as a Hugging Face directory: dequantized once, then reused.

transformers reads a GGUF through the same `from_pretrained` as a checkpoint (`gguf_file=`);
with `GgufConfig(dequantize=True)` the weights come out as plain fp32 tensors (without it they
stay packed and transformers reaches for GGUF matmul kernels on the Hub). Doing that on every
load costs ~30 s for a 135M model here, so the result — config.json, model.safetensors and the
tokenizer with the GGUF's chat template — is saved once under $XDG_CACHE_HOME/mens/gguf/<sha256>
(mens.source.gguf.cache_root), written to a temporary directory and renamed into place so a run
killed half-way never leaves a directory that looks done. Everything after (training, export,
serve, eval) loads that directory through mens.model.load.weights_dir like any other.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

_SAID: set[Path] = set()


def dequantized(rung) -> Path:
    """The rung's GGUF as a Hugging Face directory, made now if it is not in the cache yet
    (progress shown, the time printed); a second call says it reused it."""
    from mens.source.gguf import cache_root, gguf_path, info

    f, _ = gguf_path(rung)
    sha = info(f)["sha256"]
    done = cache_root() / sha
    if (done / "config.json").is_file():
        if done not in _SAID:   # the tokenizer and the model both ask: said once a process
            _SAID.add(done)
            print(f"mens: {f.name}: reused its dequantized copy {done} (sha256 {sha[:12]}…, "
                  f"dequantized once)", flush=True)
        return done
    print(f"mens: {f.name}: dequantizing once into {done} (sha256 {sha[:12]}…) …", flush=True)
    t0 = time.perf_counter()
    tmp = done.with_name(f".{sha}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _convert(f, tmp)
        try:
            os.rename(tmp, done)
        except OSError:   # another process finished first: its copy is the same file's
            if not (done / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"mens: {f.name}: dequantized in {time.perf_counter() - t0:.1f} s → {done}",
          flush=True)
    _SAID.add(done)
    return done


def _convert(f: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tok = AutoTokenizer.from_pretrained(str(f.parent), gguf_file=f.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(f.parent), gguf_file=f.name, dtype=torch.float32,
        quantization_config=GgufConfig(dequantize=True))
    # a GGUF-quantized model refuses save_pretrained while these name the quantizer; the
    # weights are plain fp32 tensors now
    model.hf_quantizer = None
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
