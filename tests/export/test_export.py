"""`python -m mens.export` on a real tiny LoRA run: merged HF dir, GGUFs, GGUF adapter, Modelfile,
manifest — checked against real transformers/PEFT and a real llama.cpp (llama-cpp-python)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mens.resources import ASSETS

try:
    import llama_cpp  # noqa: F401  (present: the llama.cpp checks run)
    HAVE_LLAMA = True
except ImportError:
    HAVE_LLAMA = False
needs_llama = pytest.mark.skipif(not HAVE_LLAMA, reason="llama-cpp-python is not installed: "
                                 "`make install` builds it (dev extra, ~8 min on 2 cores)")
TYPES = ["f32", "f16", "q8_0", "q4_0"] + (["q4_k_m"] if HAVE_LLAMA else [])


def cli(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.run([sys.executable, "-m", "mens.export", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout)


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("checkpoints", "export"))
    return dst


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny models on a shared 2-core box: torch's second thread only spin-waits (~10x slower)."""
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def exported(tiny_run, tmp_path_factory):
    """One export of a copy of the session's tiny LoRA run, as a user runs it (verify on)."""
    tmp = tmp_path_factory.mktemp("export")
    run = copy_run(tiny_run, tmp / "run")
    t0 = time.time()
    p = cli(f"run={run}", f"export.gguf=[{','.join(TYPES)}]", f"export.verify={HAVE_LLAMA}",
            cwd=tmp)
    assert p.returncode == 0, p.stdout + p.stderr
    print(f"\nexport + verify: {time.time() - t0:.1f} s\n{p.stdout}")
    out = run / "export"
    return {"run": run, "out": out, "proc": p, "tmp": tmp,
            "manifest": json.loads((out / "export.json").read_text())}


def test_export_writes_every_file_and_hashes_them(exported):
    out, m = exported["out"], exported["manifest"]
    names = {f["path"] for f in m["files"]}
    assert {f"model-{t}.gguf" for t in TYPES} | {"adapter.gguf", "base-f16.gguf", "Modelfile",
                                                 "Modelfile.merged"} <= names
    assert {"merged/config.json", "merged/model.safetensors", "merged/tokenizer.json",
            "merged/tokenizer_config.json"} <= names
    for f in m["files"]:
        data = (out / f["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == f["sha256"] and len(data) == f["bytes"]
    assert m["source_run"] == str(exported["run"]) and m["lane"] == "lora"
    assert m["base"]["ref"].startswith("mens/tiny@sha256:278458af0a13")   # SHA256SUMS of the asset
    assert m["gguf_types"] == TYPES and m["merge"]["dtype"] == "bf16"
    assert not [p for p in out.rglob(".*") if ".tmp" in p.name]          # no temp leftovers
    assert not (exported["tmp"] / "outputs").exists()                    # no Hydra run dir
    sizes = {f["path"]: f["bytes"] for f in m["files"]}
    assert sizes["model-q8_0.gguf"] < 0.6 * sizes["model-f16.gguf"]
    assert sizes["model-f16.gguf"] < 0.55 * sizes["model-f32.gguf"]


def test_merged_dir_loads_and_equals_peft_merge_and_unload(exported):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(str(exported["out"] / "merged"))
    assert merged.dtype == torch.bfloat16
    ref = AutoModelForCausalLM.from_pretrained(str(ASSETS / "tiny"), dtype=torch.float32)
    ref = PeftModel.from_pretrained(ref, str(exported["run"] / "adapter")).merge_and_unload()
    got, want = merged.state_dict(), ref.state_dict()
    assert set(got) == set(want)
    # PEFT's fp32 merge, rounded once to the base's bf16, is exactly what export wrote
    assert all(torch.equal(got[k], want[k].to(torch.bfloat16)) for k in want)
    base = AutoModelForCausalLM.from_pretrained(str(ASSETS / "tiny")).state_dict()
    changed = [k for k in base if not torch.equal(base[k], got[k])]
    assert len(changed) == 4 * 7            # every LoRA target in every layer moved, nothing else


def test_gguf_metadata_tensors_and_types(exported):
    import gguf

    r = gguf.GGUFReader(exported["out"] / "model-q8_0.gguf")
    f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("GGUF.")}
    assert f["general.architecture"] == "qwen3" and f["general.type"] == "model"
    assert (f["qwen3.block_count"], f["qwen3.embedding_length"], f["qwen3.feed_forward_length"],
            f["qwen3.attention.head_count"], f["qwen3.attention.head_count_kv"],
            f["qwen3.attention.key_length"], f["qwen3.context_length"]) == \
        (4, 256, 768, 4, 2, 64, 4096)
    assert f["qwen3.rope.freq_base"] == 1e6
    assert f["tokenizer.ggml.model"] == "gpt2" and f["tokenizer.ggml.pre"] == "qwen2"
    tokens, types = f["tokenizer.ggml.tokens"], f["tokenizer.ggml.token_type"]
    assert len(tokens) == 4096 and tokens[4095] == "<|im_end|>"
    assert types[4093:] == [3, 3, 3] and set(types[:4093]) == {1}    # specials CONTROL, rest NORMAL
    assert len(f["tokenizer.ggml.merges"]) == 3837
    assert (f["tokenizer.ggml.eos_token_id"], f["tokenizer.ggml.padding_token_id"]) == (4095, 4093)
    assert f["tokenizer.ggml.add_bos_token"] is False
    from transformers import AutoTokenizer    # the tokenizer's whole template, tools included
    assert f["tokenizer.chat_template"] == \
        AutoTokenizer.from_pretrained(str(exported["out"] / "merged")).chat_template
    assert "<tool_call>" in f["tokenizer.chat_template"]
    names = {t.name: t.tensor_type.name for t in r.tensors}
    assert len(names) == 2 + 4 * 11 and "output.weight" not in names     # tied: no output tensor
    assert names["blk.3.attn_q_norm.weight"] == "F32" and names["blk.0.ffn_down.weight"] == "Q8_0"
    assert names["token_embd.weight"] == "Q8_0"
    q4 = {t.name: t.tensor_type.name
          for t in gguf.GGUFReader(exported["out"] / "model-q4_0.gguf").tensors}
    assert q4["blk.0.attn_k.weight"] == "Q4_0"
    if HAVE_LLAMA:   # llama.cpp's quantizer chose the K-quant mix
        kq = {t.tensor_type.name
              for t in gguf.GGUFReader(exported["out"] / "model-q4_k_m.gguf").tensors}
        assert "Q4_K" in kq


def test_adapter_gguf_is_peft_a_and_b_as_they_are(exported):
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    r = gguf.GGUFReader(exported["out"] / "adapter.gguf")
    f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("GGUF.")}
    assert (f["general.type"], f["adapter.type"], f["adapter.lora.alpha"]) == \
        ("adapter", "lora", 32.0)
    assert r.fields["adapter.lora.alpha"].types[0] == gguf.GGUFValueType.FLOAT32
    assert not any(k.startswith("tokenizer.") for k in f)
    t = {x.name: x for x in r.tensors}
    assert len(t) == 2 * 4 * 7
    peft = load_file(str(exported["run"] / "adapter" / "adapter_model.safetensors"))
    a = peft["base_model.model.model.layers.2.mlp.down_proj.lora_A.weight"]     # [r, in] [16, 768]
    b = peft["base_model.model.model.layers.2.mlp.down_proj.lora_B.weight"]     # [out, r] [256, 16]
    assert list(t["blk.2.ffn_down.weight.lora_a"].shape) == [768, 16]            # ggml ne: reversed
    assert np.array_equal(t["blk.2.ffn_down.weight.lora_a"].data, a)
    assert np.array_equal(t["blk.2.ffn_down.weight.lora_b"].data, b)


def test_modelfile_parses_back_and_its_template_is_the_chat_template(exported):
    from transformers import AutoTokenizer

    from mens.export.modelfile import check_modelfile, parse_modelfile, render_go

    out = exported["out"]
    parsed = parse_modelfile((out / "Modelfile").read_text())
    assert parsed["FROM"] == ["./base-f16.gguf"] and parsed["ADAPTER"] == ["./adapter.gguf"]
    assert ("stop", "<|im_end|>") in parsed["PARAMETER"]
    tok = AutoTokenizer.from_pretrained(str(out / "merged"))
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q?\nmore"},
            {"role": "assistant", "content": "A."}, {"role": "user", "content": "again"}]
    assert render_go(parsed["TEMPLATE"][0], msgs) == tok.apply_chat_template(
        msgs, tokenize=False, add_generation_prompt=True)
    for name in ("Modelfile", "Modelfile.merged"):
        c = check_modelfile(out / name, tok)
        assert not c["missing_files"] and not c["template_mismatches"] and c["stops_are_tokens"]
    assert parse_modelfile((out / "Modelfile.merged").read_text())["FROM"] == ["./model-f32.gguf"]
    assert "ollama create" in (out / "Modelfile").read_text()
    # the tiny rung's template writes Hermes calls: the TEMPLATE renders them (tool probes pass)
    m = exported["manifest"]
    assert m["chat"]["tool_syntax"] == "hermes" and m["chat"]["ollama_template"] == "chatml-tools"
    assert m["chat"]["ollama_tools"] and c["tools"]
    assert any("renders tools and hermes tool calls" in n for n in m["notes"])


@needs_llama
def test_llama_cpp_verification_report(exported):
    v = exported["manifest"]["verify"]
    print(json.dumps({k: v[k] for k in v if k != "modelfile"}, indent=1))
    assert v["ok"], v["failed"]
    assert v["tokenizer"]["identical"] == v["tokenizer"]["of"] == 16
    # identical greedy decodes; a decode may part only at a float near-tie (margin < 1e-3)
    for a in (v["gguf"]["f32"], v["gguf"]["f16"], v["adapter_gguf"]):
        assert a["ok"] and a["of"] == v["prompts"] == 5
        assert a["identical"] + len(a["near_ties"]) == 5 and a["identical"] >= 4
    assert v["merged_vs_base"]["differing"] >= 1
    assert v["gguf"]["q8_0"]["prefix_agreement"] > 0.3           # reported; quantised, not exact
    assert "verify: OK" in exported["proc"].stdout


@pytest.fixture(scope="module")
def llm_f32(exported):
    from mens.export.verify import llama
    return llama(exported["out"] / "model-f32.gguf")


@needs_llama
def test_llama_cpp_tokenizes_every_held_out_record_like_transformers(exported, llm_f32):
    """Independent of mens.verify: whole rendered ChatML records of the spoke's eval split."""
    from transformers import AutoTokenizer

    from mens.data.corpus import load_eval, render
    from mens.plan.spec import load_rerun

    tok = AutoTokenizer.from_pretrained(str(exported["out"] / "merged"))
    recs = load_eval(load_rerun(str(exported["run"])).spoke)[:25]
    for rec in recs:
        text = render(rec)
        assert llm_f32.tokenize(text.encode(), add_bos=False, special=True) == \
            tok(text, add_special_tokens=False).input_ids


@needs_llama
def test_llama_cpp_sampler_greedy_equals_transformers_generate(exported, llm_f32):
    """Independent of mens.verify's loops: transformers `generate` vs llama.cpp's own greedy
    sampler, on the merged model (f32 GGUF vs the merged dir in fp32)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = exported["out"]
    tok = AutoTokenizer.from_pretrained(str(out / "merged"))
    model = AutoModelForCausalLM.from_pretrained(str(out / "merged"), dtype=torch.float32)
    for text in ("def main():\n",
                 "<|im_start|>user\nWrite a Vox loop.<|im_end|>\n<|im_start|>assistant\n"):
        ids = tok(text).input_ids
        want = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False,
                              eos_token_id=None, pad_token_id=4093)[0, len(ids):].tolist()
        llm_f32.reset()
        got = []
        for t in llm_f32.generate(ids, temp=0.0, repeat_penalty=1.0, reset=True):
            got.append(t)
            if len(got) == 16:
                break
        assert got == want, text


BAD = {
    "no run": ([], "run", "no run given"),
    "unsupported type": (["export.gguf=[q3_k]"], "export.gguf", "unsupported GGUF type `q3_k`"),
    "bad dtype": (["export.dtype=int8"], "export.dtype", "use one of auto"),
    "stray override": (["lane=full"], "lane", "would be ignored"),
    "no adapter": ([], "run", "has no adapter/"),
    "other base": ([], "run", "trained on a different base"),
    "unwritable": ([], "export.out", "is not writable"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_exits_2_with_one_paragraph_and_writes_nothing(case, tiny_run, tmp_path):
    extra, key, words = BAD[case]
    run = copy_run(tiny_run, tmp_path / "run")
    args = [f"run={run}", *extra] if case != "no run" else []
    if case == "no adapter":
        shutil.rmtree(run / "adapter")
    if case == "other base":       # a real PEFT adapter of a Qwen3 with hidden 128, not 256
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import Qwen3Config, Qwen3ForCausalLM

        torch.manual_seed(0)
        small = Qwen3ForCausalLM(Qwen3Config(
            hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=2,
            num_key_value_heads=1, head_dim=64, vocab_size=4096))
        shutil.rmtree(run / "adapter")
        get_peft_model(small, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj"])) \
            .save_pretrained(str(run / "adapter"))
    if case == "unwritable":
        (tmp_path / "afile").write_text("x")
        args.append(f"export.out={tmp_path / 'afile' / 'export'}")
    p = cli(*args, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    err = p.stderr.strip()
    assert err.startswith("mens: error (exit 2):") and "\n" not in err and "Traceback" not in err
    assert words in err and key.split(".")[0] in err
    assert not (run / "export").exists()


@pytest.mark.parametrize("arg", ["export.gguf=[q4_k_m]", "export.verify=true"])
def test_without_llama_cpp_k_quants_and_verify_exit_2(arg, tiny_run, tmp_path):
    code = ("import sys; sys.modules['llama_cpp'] = None\n"   # as if llama-cpp-python were absent
            f"sys.argv = ['x', 'run={tiny_run}', '{arg}', 'export.out={tmp_path}/e']\n"
            "from mens.cli.export import main; sys.exit(main())\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert "llama-cpp-python" in p.stderr and "pip install" in p.stderr
    assert arg.split("=")[0] in p.stderr
    assert not (tmp_path / "e").exists()


def test_interrupted_export_leaves_no_partial_file_under_a_final_name(tiny_run, tmp_path):
    import gguf

    run = copy_run(tiny_run, tmp_path / "run")
    out = tmp_path / "e"
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    args = [sys.executable, "-m", "mens.export", f"run={run}", f"export.out={out}",
            "export.gguf=[f32,f16,q8_0,q4_0]"]
    p = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:     # interrupt mid-write of some file
        if out.is_dir() and any(".tmp" in x.name for x in out.iterdir()):
            p.send_signal(signal.SIGINT)
            break
        time.sleep(0.002)
    assert p.wait(60) == 130, p.stderr.read().decode()
    left = sorted(x.name for x in out.iterdir())
    assert not [x for x in left if ".tmp" in x], left               # temps removed on the way out
    assert "export.json" not in left                                # the manifest comes last
    for g in out.glob("*.gguf"):                                    # what is there is whole
        gguf.GGUFReader(g)
    again = subprocess.run(args[:-1] + ["export.gguf=[f16]"], cwd=tmp_path, env=env,
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert (out / "export.json").is_file()


def test_qlora_run_merges_into_its_dequantized_base(exported, tmp_path):
    """A QLoRA run's adapter merges into the nf4-dequantized base: the merged model computes
    what PEFT on the real bitsandbytes 4-bit base computes."""
    import bitsandbytes as bnb
    import bitsandbytes.functional as F
    import torch
    import yaml
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    run = copy_run(exported["run"], tmp_path / "qrun")
    spec = yaml.safe_load((run / "spec.yaml").read_text())
    spec["lane"].update(kind="qlora", name="qlora",
                        quantization={"type": "nf4", "double_quant": True, "blocksize": 64})
    (run / "spec.yaml").write_text(yaml.safe_dump(spec))
    p = cli(f"run={run}", "export.dtype=fp32", "export.gguf=[]", "export.adapter_gguf=false",
            "export.modelfile=false", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "dequantized from nf4" in p.stdout
    q = AutoModelForCausalLM.from_pretrained(str(ASSETS / "tiny"), dtype=torch.float32,
                                             quantization_config=BitsAndBytesConfig(
                                                 load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                 bnb_4bit_use_double_quant=True,
                                                 bnb_4bit_compute_dtype=torch.float32),
                                             device_map={"": "cpu"})
    # the weights the QLoRA run trained against: bitsandbytes' own dequantisation of its 4-bit base
    deq = {f"{n}.weight": F.dequantize_4bit(m.weight.data, m.weight.quant_state)
           for n, m in q.named_modules() if isinstance(m, bnb.nn.Linear4bit)}
    assert len(deq) == 4 * 7
    lora = load_file(str(run / "adapter" / "adapter_model.safetensors"))
    merged = AutoModelForCausalLM.from_pretrained(str(run / "export" / "merged")).eval()
    got = merged.state_dict()
    for n, w in deq.items():
        a = lora[f"base_model.model.{n[:-7]}.lora_A.weight"]      # [r, in]
        b = lora[f"base_model.model.{n[:-7]}.lora_B.weight"]      # [out, r]
        assert torch.equal(got[n], w + (b @ a) * 2.0), n          # alpha 32 / r 16
    # and it computes what PEFT on the 4-bit base computes (bnb's CPU matmul rounds a little)
    q = PeftModel.from_pretrained(q, str(run / "adapter")).eval()
    plain = AutoModelForCausalLM.from_pretrained(str(exported["out"] / "merged"),
                                                 dtype=torch.float32)
    ids = torch.tensor([list(range(10, 74))])
    with torch.no_grad():
        want, d_merged, d_plain = q(ids).logits, merged(ids).logits, plain(ids).logits
    print((d_merged - want).abs().max(), (d_plain - want).abs().max())
    assert (d_plain - want).abs().max() > 3 * (d_merged - want).abs().max()


def test_full_lane_exports_its_trained_weights(exported, tmp_path):
    import yaml

    run = copy_run(exported["run"], tmp_path / "frun")
    shutil.rmtree(run / "adapter")
    shutil.copytree(exported["out"] / "merged", run / "model")     # a full run's model/ dir
    spec = yaml.safe_load((run / "spec.yaml").read_text())
    spec["lane"].update(kind="full", name="full", lora=None)
    (run / "spec.yaml").write_text(yaml.safe_dump(spec))
    p = cli(f"run={run}", "export.gguf=[q8_0]", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = run / "export"
    assert (out / "merged" / "model.safetensors").read_bytes() == \
        (run / "model" / "model.safetensors").read_bytes()
    assert not (out / "adapter.gguf").exists()
    from mens.export.modelfile import parse_modelfile
    assert parse_modelfile((out / "Modelfile").read_text())["FROM"] == ["./model-q8_0.gguf"]
