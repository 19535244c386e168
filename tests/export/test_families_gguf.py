"""GGUF export of every supported family, checked against a real llama.cpp (llama-cpp-python).

Per family: a tiny random model built with its real transformers config class, a byte-level BPE
tokenizer (mens's tiny one, with the family's special tokens, split regex and chat template),
exported by mens to f32 GGUF (f16 for Llama), loaded by llama.cpp: token ids and greedy
continuations must equal transformers'; a random LoRA on every linear layer, exported as an
adapter GGUF and applied by llama.cpp (`lora_path`), must decode like PEFT. Weights, biases and
norms are all random (not the zero/one init), so a missing transform (Llama's q/k permutation,
Gemma's norm + 1, Qwen2's biases) changes the output.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from families_util import FAMILIES, make_model, make_tokenizer

from mens.errors import ConfigError
from mens.export.arch import UNWRITTEN
from mens.source.families import FAMILIES as ROWS

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed: "
                                "`make install` builds it (dev extra, ~8 min on 2 cores)")

N_NEW = 10
EXPORTED = [f for f in FAMILIES if f not in UNWRITTEN]


def targets(fam: str) -> list[str]:
    """Every linear layer of the family's decoder layer (its default LoRA targets: fused Phi-3
    projections, Qwen3.5's DeltaNet projections; a MoE's router, lane.lora.router=true)."""
    row = ROWS[fam]
    return list(row.lora_targets) + ([row.router] if row.experts else [])


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)       # tiny models on a shared 2-core box
    yield
    torch.set_num_threads(n)


def prompts(tok) -> list[list[int]]:
    from mens.export.modelfile import PROBES
    out = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True,
                                   return_dict=False) for m in PROBES[1:]]
    return [list(ids) for ids in out] + [tok("def fibonacci(n):\n    return 12345 + n").input_ids]


@pytest.fixture(scope="module", params=EXPORTED)
def family_export(request, tmp_path_factory):
    """One family: its HF dir, base f32 GGUF, and a random LoRA with its adapter GGUF."""
    import torch
    from peft import LoraConfig, get_peft_model

    from mens.config.schema import LoraConfig as LaneLora
    from mens.export.gguf import write_adapter_gguf, write_model_gguf
    from mens.export.merge import SafetensorsDir, load_adapter
    from mens.model.load import lora_plan

    fam, t0 = request.param, time.time()
    tmp = tmp_path_factory.mktemp(fam)
    hf = tmp / "hf"
    tok = make_tokenizer(fam, hf)
    model = make_model(fam, hf, len(tok))
    f32 = write_model_gguf(SafetensorsDir(hf), hf, tmp / "model-f32.gguf", "f32", fam)
    torch.manual_seed(1)
    # as training asks PEFT for them: a router that is no nn.Linear (gpt-oss, Qwen3.5-MoE)
    # as a target parameter
    modules, params = lora_plan(model, LaneLora(r=8, alpha=16, targets=targets(fam)), [])
    peft = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=list(modules),
                                            target_parameters=list(params) or None,
                                            init_lora_weights=False))
    peft.save_pretrained(str(tmp / "adapter"))
    adapter = write_adapter_gguf(load_adapter(tmp / "adapter"), hf, tmp / "adapter.gguf", fam)
    yield {"family": fam, "hf": hf, "tok": tok, "f32": f32, "adapter_dir": tmp / "adapter",
           "adapter": adapter, "tmp": tmp, "t0": t0}
    print(f"\n{fam}: {time.time() - t0:.1f} s")


def _hf(hf: Path):
    from mens.export.merge import SafetensorsDir
    from mens.export.verify import hf_model
    return hf_model(hf, SafetensorsDir(hf))


def test_llama_cpp_tokenizes_and_decodes_like_transformers(family_export):
    from mens.export.verify import exact, hf_greedy, llama, llama_greedy, tok_check, tok_texts

    e, tok = family_export, family_export["tok"]
    llm = llama(e["f32"])
    for texts in (None, tok_texts(tok)):
        t = tok_check(llm, tok) if texts is None else tok_check(llm, tok, texts)
        assert t["identical"] == t["of"], t["first_mismatch"]
    ps = prompts(tok)
    ref_model = _hf(e["hf"])
    want = [hf_greedy(ref_model, p, N_NEW) for p in ps]
    got = [llama_greedy(llm, p, N_NEW) for p in ps]
    a = exact(got, want, ps, ref_model)
    print(e["family"], a, [len(set(w)) for w in want])
    assert min(len(set(w)) for w in want) >= 3            # varied decodes, not one token repeated
    assert a["ok"] and a["identical"] >= len(ps) - 1, a   # a decode may part only at a near-tie


def test_llama_cpp_with_the_adapter_gguf_decodes_like_peft(family_export):
    from peft import PeftModel

    from mens.export.verify import exact, hf_greedy, llama, llama_greedy

    e = family_export
    ps = prompts(e["tok"])
    base = _hf(e["hf"])
    plain = [hf_greedy(base, p, N_NEW) for p in ps]
    peft = PeftModel.from_pretrained(base, str(e["adapter_dir"])).eval()
    want = [hf_greedy(peft, p, N_NEW) for p in ps]
    assert want != plain                                  # the adapter changes the output
    llm = llama(e["f32"], lora=e["adapter"])
    a = exact([llama_greedy(llm, p, N_NEW) for p in ps], want, ps, peft)
    print(e["family"], "adapter", a)
    assert a["ok"] and a["identical"] >= len(ps) - 1, a


def test_gguf_keys_and_tensors_follow_the_converter(family_export):
    import gguf
    from transformers import AutoConfig

    from mens.source.families import FAMILIES as ARCH

    e = family_export
    cfg = json.loads((e["hf"] / "config.json").read_text())
    fam = ARCH[e["family"]]
    r = gguf.GGUFReader(e["f32"])
    f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("GGUF.")}
    a = fam.gguf_arch
    assert f["general.architecture"] == a
    assert f[f"{a}.attention.head_count_kv"] == cfg["num_key_value_heads"]
    assert f[f"{a}.attention.key_length"] == (cfg.get("head_dim") or 32)
    assert f["tokenizer.ggml.pre"] == ("llama-bpe" if e["family"] == "llama" else "qwen2")
    names = {t.name for t in r.tensors}
    tied = AutoConfig.from_pretrained(e["hf"]).tie_word_embeddings
    assert ("output.weight" in names) == (not tied)          # tied: no output tensor
    assert ("blk.0.attn_q.bias" in names) == (e["family"] in ("qwen2", "gpt_oss"))
    assert ("rope_freqs.weight" in names) == (e["family"] == "llama")
    if a == "gemma2":
        assert (f["gemma2.attn_logit_softcapping"], f["gemma2.final_logit_softcapping"],
                f["gemma2.attention.sliding_window"]) == (50.0, 30.0, 8)
    if a == "olmo2":    # q/k norms over the whole projections, post-attention/-ffw norms
        assert {t.name: tuple(t.shape) for t in r.tensors if t.name.startswith("blk.0.")
                and "norm" in t.name} == {"blk.0.attn_q_norm.weight": (128,),
                                          "blk.0.attn_k_norm.weight": (64,),
                                          "blk.0.post_attention_norm.weight": (128,),
                                          "blk.0.post_ffw_norm.weight": (128,)}
    if a == "gemma3":
        assert f["gemma3.attention.sliding_window"] == 8
        assert f["gemma3.rope.freq_base"] == 1e6 and f["gemma3.rope.freq_base_swa"] == 1e4
    if fam.experts:            # experts stacked [E, out, in] (ggml ne reversed), router F32
        n_exp = cfg.get("num_experts") or cfg["num_local_experts"]
        width = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
        assert (f[f"{a}.expert_count"], f[f"{a}.expert_used_count"]) == (n_exp, 2)
        shapes = {t.name: tuple(int(x) for x in t.shape) for t in r.tensors}
        assert shapes["blk.0.ffn_gate_exps.weight"] == (128, width, n_exp)
        assert shapes["blk.0.ffn_up_exps.weight"] == (128, width, n_exp)
        assert shapes["blk.0.ffn_down_exps.weight"] == (width, 128, n_exp)
        assert {t.name: t.tensor_type.name for t in r.tensors}["blk.0.ffn_gate_inp.weight"] == \
            "F32"
        if a != "llama":
            assert f[f"{a}.expert_feed_forward_length"] == width
    if a == "phi3":            # fused q/k/v and gate/up, as llama.cpp's phi3 takes them
        assert {"blk.0.attn_qkv.weight", "blk.0.ffn_up.weight"} <= names
        assert f["phi3.rope.dimension_count"] == 32 and f["phi3.attention.sliding_window"] == 0
        assert f["phi3.rope.scaling.original_context_length"] == 4096
    if a in ("qwen35", "qwen35moe"):    # Gated DeltaNet + gated attention, M-RoPE sections
        assert f[f"{a}.attention.recurrent_layers"] == [True, False]
        assert (f[f"{a}.ssm.group_count"], f[f"{a}.ssm.time_step_rank"],
                f[f"{a}.ssm.inner_size"], f[f"{a}.rope.dimension_count"]) == (2, 4, 64, 8)
        assert f[f"{a}.rope.dimension_sections"] == [11, 11, 10, 0]
        assert {"blk.0.ssm_a", "blk.0.ssm_dt.bias", "blk.0.ssm_conv1d.weight",
                "blk.0.attn_gate.weight", "blk.1.attn_q_norm.weight"} <= names
    if a == "gpt-oss":         # sinks, expert biases, the yarn rope and the window
        assert {"blk.0.attn_sinks.weight", "blk.0.ffn_gate_exps.bias", "blk.0.ffn_up_exps.bias",
                "blk.0.ffn_down_exps.bias", "blk.0.ffn_gate_inp.bias"} <= names
        assert (f["gpt-oss.attention.sliding_window"], f["gpt-oss.rope.scaling.factor"],
                f["gpt-oss.rope.scaling.original_context_length"]) == (8, 32.0, 4096)
    t = {x.name: x for x in gguf.GGUFReader(e["adapter"]).tensors}
    n = len(targets(e["family"])) * cfg["num_hidden_layers"]     # every target, every layer
    if a.startswith("qwen35"):   # but DeltaNet's five only in linear-attention layers, q/k/v/o
        kinds = cfg["layer_types"]                                   # only in full-attention ones
        n -= 4 * kinds.count("linear_attention") + 5 * kinds.count("full_attention")
    assert len(t) == 2 * n


def test_modelfile_template_is_the_familys_chat_format(family_export):
    from mens.export.modelfile import (CHATML_GO, GEMMA_GO, LLAMA3_GO, MISTRAL_GO,
                                       check_modelfile, modelfile_text)
    from mens.export.ollama_templates import PHI3_GO

    e = family_export
    text = modelfile_text("model-f32.gguf", "adapter.gguf", "test", hf_dir=e["hf"])
    (e["tmp"] / "Modelfile").write_text(text)
    c = check_modelfile(e["tmp"] / "Modelfile", e["tok"])
    assert not c["missing_files"] and c["stops_are_tokens"] and c["stops"]
    if e["family"] == "gpt_oss":        # harmony: no Go template of mens renders it
        assert c["template"] is False and "# NOTE: Modelfile: no TEMPLATE" in text
        return
    assert c["template"] and not c["template_mismatches"]
    want = {"qwen2": CHATML_GO, "qwen3": CHATML_GO, "llama": LLAMA3_GO, "mistral": MISTRAL_GO,
            "gemma2": GEMMA_GO, "gemma3_text": GEMMA_GO,
            "olmo2": CHATML_GO,                 # the tiny OLMo 2's ChatML (row: chat None)
            "qwen3_moe": CHATML_GO, "mixtral": MISTRAL_GO, "phi3": PHI3_GO,
            "qwen3_5_text": CHATML_GO, "qwen3_5_moe_text": CHATML_GO}[e["family"]]
    assert f'TEMPLATE """{want}"""' in text
    if e["family"] == "phi3":
        assert 'PARAMETER stop "<|end|>"' in text


def test_f16_llama_gguf_decodes_like_f16_rounded_transformers(tmp_path):
    """The q/k permutation at f16: against transformers on f16-rounded weights and inputs."""
    from mens.export.gguf import write_model_gguf
    from mens.export.merge import SafetensorsDir
    from mens.export.verify import exact, hf_greedy, hf_model, llama, llama_greedy

    tok = make_tokenizer("llama", tmp_path / "hf")
    make_model("llama", tmp_path / "hf", len(tok))
    src = SafetensorsDir(tmp_path / "hf")
    p = write_model_gguf(src, tmp_path / "hf", tmp_path / "m-f16.gguf", "f16", "llama")
    emu = hf_model(tmp_path / "hf", src, emulate="f16")
    ps = prompts(tok)
    llm = llama(p)
    a = exact([llama_greedy(llm, x, N_NEW) for x in ps], [hf_greedy(emu, x, N_NEW) for x in ps],
              ps, emu)
    assert a["ok"] and a["identical"] >= len(ps) - 1, a


def test_unsupported_inputs_exit_2_naming_the_cause(tmp_path):
    from mens.export.gguf import preflight, write_model_gguf
    from mens.export.merge import SafetensorsDir

    hf = tmp_path / "hf"
    tok = make_tokenizer("gemma2", hf)
    make_model("gemma2", hf, len(tok))
    cfg = json.loads((hf / "config.json").read_text())

    def export(**change):
        (hf / "config.json").write_text(json.dumps({**cfg, **change}))
        return write_model_gguf(SafetensorsDir(hf), hf, tmp_path / "x.gguf", "f32", "x")

    with pytest.raises(ConfigError, match="model_type `falcon` has no GGUF export"):
        export(model_type="falcon")
    with pytest.raises(ConfigError, match=r"'qwen3_5' has no text_config object"):
        export(model_type="qwen3_5")         # a multimodal checkpoint exports its text model
    with pytest.raises(ConfigError, match="query_pre_attn_scalar 256 != head_dim 32"):
        export(query_pre_attn_scalar=256)
    with pytest.raises(ConfigError, match="rope_type `yarn`"):
        export(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0})
    with pytest.raises(ConfigError, match="final_logit_softcapping off"):
        export(final_logit_softcapping=None)
    with pytest.raises(ConfigError, match=r"layer_types .* every 2-th layer full"):
        export(layer_types=["full_attention", "full_attention"])
    tj = json.loads((hf / "tokenizer.json").read_text())
    tj["model"]["byte_fallback"] = True                   # a sentencepiece-style tokenizer
    (hf / "tokenizer.json").write_text(json.dumps(tj))
    with pytest.raises(ConfigError, match="sentencepiece-style"):
        export()
    with pytest.raises(ConfigError, match="sentencepiece-style"):
        preflight(hf)                                     # before anything is written
    assert not (tmp_path / "x.gguf").exists() and not list(tmp_path.glob(".x.gguf*"))


def test_preflight_notes_mistrals_sliding_window(tmp_path):
    from mens.export.gguf import preflight

    hf = tmp_path / "hf"
    tok = make_tokenizer("mistral", hf)
    make_model("mistral", hf, len(tok))
    assert preflight(hf) == []
    cfg = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**cfg, "sliding_window": 4096}))
    (note,) = preflight(hf)
    assert "without the sliding window (4096 tokens)" in note


def test_a_chat_format_mens_cannot_express_gets_no_template_and_a_note(tmp_path):
    """Zephyr-style `<|user|>` turns match none of mens's Go templates: the Modelfile has no
    TEMPLATE, says so in a comment, and modelfile_plan returns the note for the manifest."""
    from mens.export.modelfile import (check_modelfile, modelfile_plan, modelfile_text,
                                       parse_modelfile)

    hf = tmp_path / "hf"
    tok = make_tokenizer("qwen3", hf)
    tok.chat_template = ("{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + "
                         "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
                         "{{ '<|assistant|>\\n' }}{% endif %}")
    tok.save_pretrained(str(hf))
    (hf / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    template, stops, notes = modelfile_plan(hf)
    assert template is None and stops == ["<|im_end|>"]
    assert len(notes) == 1 and "no TEMPLATE" in notes[0] and "renders like none" in notes[0]
    (tmp_path / "m.gguf").write_bytes(b"")
    text = modelfile_text("m.gguf", None, "test", hf_dir=hf)
    assert "TEMPLATE" not in parse_modelfile(text) and "# NOTE: Modelfile: no TEMPLATE" in text
    (tmp_path / "Modelfile").write_text(text)
    c = check_modelfile(tmp_path / "Modelfile", tok)
    assert c["template"] is False and not c["missing_files"] and c["stops_are_tokens"]


def test_go_template_translation_renders_branches_and_index():
    """render_go's subset: if / else if / else, eq / and / not, index, range with $i."""
    from mens.export.modelfile import GEMMA_GO, MISTRAL_GO, render_go

    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
            {"role": "assistant", "content": "A"}, {"role": "user", "content": "V"}]
    assert render_go(GEMMA_GO, msgs) == ("<start_of_turn>user\nS\n\nU<end_of_turn>\n"
                                         "<start_of_turn>model\nA<end_of_turn>\n"
                                         "<start_of_turn>user\nV<end_of_turn>\n"
                                         "<start_of_turn>model\n")
    assert render_go(MISTRAL_GO, msgs[1:]) == "[INST] U[/INST]A</s>[INST] V[/INST]"
    with pytest.raises(ValueError, match="mens does not model"):     # Go prints %v of a slice
        render_go("{{ range .Messages }}{{ .Images }}{{ end }}", msgs)
    with pytest.raises(ValueError, match="Go construct"):
        render_go("{{ range .Messages }}{{ .Images | len }}{{ end }}", msgs)


def test_phi4_chat_format_gets_its_template_and_stop(tmp_path):
    """Phi-4's <|im_start|>role<|im_sep|>…<|im_end|> (its published template, no newlines) is
    the phi3 family's second Go template; Phi-3's <|end|> is no token there, so not a stop."""
    from mens.export.modelfile import modelfile_plan
    from mens.export.ollama_templates import PHI4_GO

    phi4 = ("{% for message in messages %}{% if (message['role'] == 'system') %}"
            "{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}"
            "{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' + "
            "message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'assistant') %}"
            "{{'<|im_start|>assistant<|im_sep|>' + message['content'] + '<|im_end|>'}}{% endif %}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_sep|>' }}"
            "{% endif %}")
    hf = tmp_path / "hf"
    make_tokenizer("qwen3", hf, chat_template=phi4)     # ChatML's specials: <|im_end|> a token
    (hf / "config.json").write_text(json.dumps({"model_type": "phi3"}))
    template, stops, _ = modelfile_plan(hf)
    assert template == PHI4_GO and stops == ["<|im_end|>", "<|endoftext|>"]
