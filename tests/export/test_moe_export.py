"""Mixture-of-experts and the new families at export: a LoRA on the fused experts (PEFT
target_parameters, lane.lora.experts=true) merged by mens equals PEFT's merge_and_unload, and
its merged GGUF decodes in llama.cpp like transformers' merged model; what llama.cpp cannot hold
or compute alike is refused (exit 2) before any file is written, or said in a note."""
from __future__ import annotations

import json

import pytest
from families_util import FAMILIES, make_model, make_tokenizer

from mens.errors import ConfigError

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed: "
                                "`make install` builds it (dev extra, ~8 min on 2 cores)")

EXPERTS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]


@pytest.fixture(autouse=True)
def one_torch_thread():
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)       # tiny models on a shared 2-core box
    yield
    torch.set_num_threads(n)


def expert_adapter(fam: str, tmp_path):
    """A tiny model of `fam` and a LoRA on attention, router and the fused experts, its lora_B
    random (PEFT starts it at zero: a no-op); returns (hf dir, tokenizer, PEFT model, dir)."""
    import torch
    from peft import LoraConfig, get_peft_model

    from mens.config.schema import LoraConfig as LaneLora
    from mens.model.load import lora_plan

    hf = tmp_path / "hf"
    tok = make_tokenizer(fam, hf)
    model = make_model(fam, hf, len(tok))
    torch.manual_seed(1)
    # the targets as training asks PEFT for them (a router that is no nn.Linear: a parameter)
    modules, params = lora_plan(model, LaneLora(r=4, alpha=8, experts=True, router=True), [])
    assert set(EXPERTS) <= set(params)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=list(modules),
                                            target_parameters=list(params)))
    with torch.no_grad():
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    peft.save_pretrained(str(tmp_path / "adapter"))
    return hf, tok, peft, tmp_path / "adapter"


@pytest.mark.parametrize("fam", ["qwen3_moe", "mixtral", "gpt_oss", "qwen3_5_moe_text"])
def test_expert_lora_merges_like_peft_and_its_gguf_decodes_alike(fam, tmp_path):
    import torch
    from test_families_gguf import N_NEW, prompts

    from mens.export.gguf import write_model_gguf
    from mens.export.merge import (MergedWeights, SafetensorsDir, check_adapter, load_adapter,
                                   write_hf_dir)
    from mens.export.verify import exact, hf_greedy, hf_model, llama, llama_greedy
    from mens.plan.adapter import check_adapter_fits
    from mens.source.families import read_config
    from omegaconf import OmegaConf

    hf, tok, peft, adapter_dir = expert_adapter(fam, tmp_path)
    adapter, base = load_adapter(adapter_dir), SafetensorsDir(hf)
    check_adapter(adapter, base)
    # the planner's shape check passes it on its own base (a shared expert's down_proj is
    # its own width, Qwen3.5's q_proj is gated) and refuses it on a wider one
    rung = OmegaConf.create({"name": "tiny", "path": str(hf), "repo_id": None,
                             **read_config(hf)})
    check_adapter_fits(adapter_dir, rung, "a")
    with pytest.raises(ConfigError, match="does not fit"):
        check_adapter_fits(adapter_dir, OmegaConf.merge(rung, {"hidden_size": 256}), "a")
    n_layers = FAMILIES[fam][1]["num_hidden_layers"]
    assert sorted(adapter.experts) == sorted(f"model.layers.{i}.{p}" for i in range(n_layers)
                                             for p in EXPERTS)
    merged = MergedWeights(base, adapter, "fp32")
    ps = prompts(tok)
    plain = [hf_greedy(hf_model(hf, base), p, N_NEW) for p in ps]
    ref = peft.merge_and_unload().eval()                  # PEFT's own merge, the reference
    mine = hf_model(hf, merged)
    with torch.no_grad():
        x = torch.tensor([sum(ps, [])])
        assert (ref(x).logits - mine(x).logits).abs().max() < 1e-4
    out = write_hf_dir(merged, hf, tmp_path / "merged", [])
    assert sorted(SafetensorsDir(out).names) == sorted(base.names)   # the checkpoint's layout
    gguf = write_model_gguf(SafetensorsDir(out), out, tmp_path / "m.gguf", "f32", "tiny")
    want = [hf_greedy(ref, p, N_NEW) for p in ps]
    assert want != plain                                  # the expert LoRA changes the output
    llm = llama(gguf)
    a = exact([llama_greedy(llm, p, N_NEW) for p in ps], want, ps, ref)
    assert a["ok"] and a["identical"] >= len(ps) - 1, a


def test_expert_lora_has_no_adapter_gguf_and_says_merge_instead(tmp_path):
    from mens.export.gguf import preflight, write_adapter_gguf
    from mens.export.merge import load_adapter

    hf, _, _, adapter_dir = expert_adapter("qwen3_moe", tmp_path)
    adapter = load_adapter(adapter_dir)
    assert preflight(hf) == []                            # the model GGUF itself is fine
    with pytest.raises(ConfigError, match="export.adapter_gguf=false and use the merged GGUF"):
        preflight(hf, adapter)
    with pytest.raises(ConfigError, match="lane.lora.experts"):
        write_adapter_gguf(adapter, hf, tmp_path / "adapter.gguf", "x")
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".adapter.gguf*"))


def test_moe_configs_llama_cpp_cannot_run_as_transformers_does_exit_2(tmp_path):
    from mens.export.gguf import preflight, write_model_gguf
    from mens.export.merge import SafetensorsDir

    hf = tmp_path / "qwen3_moe"
    tok = make_tokenizer("qwen3_moe", hf)
    make_model("qwen3_moe", hf, len(tok))
    cfg = json.loads((hf / "config.json").read_text())
    for change, why in (({"norm_topk_prob": False}, "norm_topk_prob false"),
                        ({"mlp_only_layers": [1]}, "dense MLP layers")):
        (hf / "config.json").write_text(json.dumps({**cfg, **change}))
        with pytest.raises(ConfigError, match=why):
            preflight(hf)
        with pytest.raises(ConfigError, match=why):
            write_model_gguf(SafetensorsDir(hf), hf, tmp_path / "x.gguf", "f32", "x")
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".x.gguf*"))


def test_gpt_oss_notes_mxfp4_and_measures_llama_cpps_truncated_yarn(tmp_path):
    """gpt-oss-20b's config says truncate=false; llama.cpp always rounds yarn's correction range
    (ggml_rope_yarn_corr_dims). The note says so; the logits show it (the tiny config of
    families_util uses truncate=true, where they agree exactly). Should llama.cpp learn the
    untruncated form, this fails and the note goes."""
    import numpy as np
    import torch
    from test_families_gguf import prompts

    from mens.export.gguf import preflight, write_model_gguf
    from mens.export.merge import SafetensorsDir
    from mens.export.verify import hf_model, llama

    hf = tmp_path / "hf"
    tok = make_tokenizer("gpt_oss", hf)
    make_model("gpt_oss", hf, len(tok))
    cfg = json.loads((hf / "config.json").read_text())
    cfg["rope_parameters"]["truncate"] = False
    (hf / "config.json").write_text(json.dumps(cfg))
    notes = preflight(hf)
    assert any("not in the published MXFP4" in n for n in notes)
    assert any("truncate=false" in n for n in notes)
    ids = sum(prompts(tok), [])[:60]
    ref = hf_model(hf, SafetensorsDir(hf))
    with torch.no_grad():
        want = ref(torch.tensor([ids])).logits[0].numpy()
    llm = llama(write_model_gguf(SafetensorsDir(hf), hf, tmp_path / "m.gguf", "f32", "x"))
    llm.eval(ids)
    got = np.array(llm.scores[:len(ids)])
    diff, top1 = np.abs(got - want).max(), (got.argmax(1) == want.argmax(1)).mean()
    print(f"gpt-oss truncate=false: llama.cpp vs transformers: max |logit diff| {diff:.3g}, "
          f"top-1 agreement {top1:.3f} over {len(ids)} positions")
    assert diff > 1e-3                  # parts from transformers (truncate=true: 0 exactly) …
    assert top1 >= 0.8                  # … but it is the same model, not another one


def test_cli_exports_an_expert_lora_merged_and_verified_without_its_adapter_gguf(
        tmp_path, monkeypatch, capsys):
    """`python -m mens.export +rung=hf adapter=…` with a LoRA on Qwen3-MoE's experts: the
    default (adapter GGUF on) writes the merged GGUF, verified against transformers by
    llama.cpp, and says (FALLBACK, in the manifest's notes) that no adapter GGUF can hold the
    experts' LoRA; asking for the adapter GGUF alone exits 2 before writing anything."""
    from mens.cli.export import main as export

    hf, _, _, adapter_dir = expert_adapter("qwen3_moe", tmp_path)
    monkeypatch.chdir(tmp_path)
    args = ["+rung=hf", f"rung.path={hf}", f"adapter={adapter_dir}",
            "export.verify=true", f"export.out={tmp_path / 'out'}"]
    assert export([*args, "export.gguf=[]", "export.merged=false", "export.modelfile=false"]) == 2
    assert "export.adapter_gguf=false and use the merged GGUF" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    assert export([*args, "export.gguf=[f32]"]) == 0
    assert "FALLBACK adapter GGUF: not written" in capsys.readouterr().out
    assert not (tmp_path / "out" / "adapter.gguf").exists()
    manifest = json.loads((tmp_path / "out" / "export.json").read_text())
    assert any(n.startswith("FALLBACK adapter GGUF") for n in manifest["notes"])
    v = manifest["verify"]
    assert v["ok"] and v["gguf"]["f32"]["identical"] == v["gguf"]["f32"]["of"]
    assert v["merged_vs_base"]["differing"] > 0                  # the experts' LoRA is in it


def test_a_qwen35_adapter_merges_into_the_published_multimodal_layout(tmp_path):
    """Qwen3.5 is published as Qwen3_5ForConditionalGeneration (its text model under
    model.language_model.*, beside a vision tower); mens trains the text model alone, so the
    adapter names model.layers.*. The merge maps the names: merged/ keeps the checkpoint's own
    layout (vision tower included) and equals PEFT's text model with the adapter; the GGUF holds
    the text model (as llama.cpp's converter writes it; the vision tower would be its --mmproj)
    and llama.cpp decodes it as transformers does."""
    import torch
    import transformers
    from omegaconf import OmegaConf
    from peft import PeftModel

    from mens.cli.export import main as export
    from mens.config.schema import LoraConfig as LaneLora
    from mens.export.merge import SafetensorsDir
    from mens.model.load import apply_lane, load_base
    from mens.source.families import read_config

    hf = tmp_path / "hf"
    tok = make_tokenizer("qwen3_5_text", hf)
    text = dict(FAMILIES["qwen3_5_text"][1], vocab_size=len(tok))
    torch.manual_seed(0)
    wrapper = transformers.Qwen3_5ForConditionalGeneration(transformers.Qwen3_5Config(
        text_config=text, vision_config=dict(depth=1, hidden_size=32, intermediate_size=64,
                                             num_heads=2, out_hidden_size=128)))
    wrapper.save_pretrained(str(hf))
    rung = OmegaConf.create({"name": "q35", "path": str(hf), "init": "pretrained",
                             "repo_id": None, **read_config(hf)})
    lane = OmegaConf.create({"method": "lora", "gradient_checkpointing": False,
                             "lora": LaneLora(r=4, alpha=8).__dict__})
    peft = apply_lane(load_base(rung, kind="lora"), lane)
    with torch.no_grad():
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    peft.save_pretrained(str(tmp_path / "adapter"))
    args = ["+rung=hf", f"rung.path={hf}", f"adapter={tmp_path / 'adapter'}",
            "export.modelfile=false", "export.adapter_gguf=false"]
    assert export([*args, "export.gguf=[f32]", "export.verify=true",
                   f"export.out={tmp_path / 'out'}"]) == 0
    v = json.loads((tmp_path / "out" / "export.json").read_text())["verify"]
    assert v["ok"] and v["gguf"]["f32"]["identical"] == v["gguf"]["f32"]["of"], v
    merged = tmp_path / "out" / "merged"
    assert sorted(SafetensorsDir(merged).names) == sorted(SafetensorsDir(hf).names)
    ids = torch.tensor([tok.encode("hello there, 12 apples")])
    ref = PeftModel.from_pretrained(
        transformers.Qwen3_5ForCausalLM.from_pretrained(str(hf), dtype=torch.float32),
        str(tmp_path / "adapter")).eval()
    mine = transformers.Qwen3_5ForConditionalGeneration.from_pretrained(
        str(merged), dtype=torch.float32).eval()
    with torch.no_grad():
        diff = (mine(input_ids=ids).logits - ref(input_ids=ids).logits).abs().max()
        moved = (mine(input_ids=ids).logits - wrapper.eval()(input_ids=ids).logits).abs().max()
    assert diff < 1e-4 and moved > 1e-2, (diff, moved)
