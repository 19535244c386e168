"""Check an export against a real llama.cpp (llama-cpp-python) and transformers.

Hard checks (`failed` lists each miss): token ids identical to the transformers tokenizer (special
tokens included, with and without the tokenizer's own specials); greedy 32-token decodes from the
spoke's held-out prompts: f32 GGUF == transformers on the same weights; f16 (bf16) GGUF ==
transformers on f16 (bf16)-rounded weights with matmul inputs rounded the same way, because
ggml's CPU matmul converts activations to the weight's type (vec_dot_type); the merged model's
output differs from the base's; llama.cpp's base GGUF + adapter.gguf == PEFT's base + adapter
(the unmerged sum llama.cpp also computes). "==" allows a decode to part from its reference
only at a float near-tie: the reference's logits of the two tokens within TIE (listed in the
report; seen here once in 13 prompts on f16, margin 9e-6). Reported, not required: quantised
GGUFs' agreement, the exported (e.g. f16) base + adapter, the merged dir's rounding (bf16)
against the exact merge.

llama.cpp runs with an f32 KV cache and no flash attention, so attention is f32 like transformers.
"""
from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

N_NEW = 32
SMALL = 256 * 2**20            # below this many bytes of weights, compute on one thread
TIE = 1e-3                     # logit margin within float noise (f16 GGUF vs emulation: 7e-4)
TEXTS = ["Hello world", "  leading spaces and\ttabs\n\nnew lines\r\n", "fn main() { let x = 42; }",
         "don't I'll we've 12345 3.14159", "naïve café — 日本語 🙂 emoji",
         "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "a<|endoftext|>b<|im_end|>",
         "def f(a, b):\n    return a + b  # sum\n"]


def prompts(spoke, tok, n: int = 4) -> list[list[int]]:
    """The first held-out records of the run's spoke, up to the assistant turn, as ChatML ids."""
    from mens.data.corpus import load_eval
    from mens.data.formats import kind

    out = []
    for rec in load_eval(spoke)[:n]:
        msgs = rec["prompt"] if kind(rec) == "pair" else rec["messages"][:-1]
        out.append(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                           return_dict=False))
    out.append(tok("def fibonacci(n):\n").input_ids)   # plain text, no chat framing
    return [list(ids) for ids in out]


def hf_model(config_dir: Path, src, emulate: str | None = None):
    """A transformers model in fp32 holding `src`'s tensors; `emulate` = f16 | bf16 rounds the
    2-D weights and every matmul input to that type, as ggml's CPU backend computes."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from mens.export import experts

    try:                          # the weights are replaced below: skip random init (seconds)
        from transformers.initialization import no_init_weights
    except ImportError:
        from contextlib import nullcontext as no_init_weights
    from mens.export.arch import text_tensors

    # a multimodal checkpoint: its text model, as training and the GGUF have it
    config = AutoConfig.from_pretrained(str(config_dir)).get_text_config()
    src = text_tensors(src, config_dir)
    with no_init_weights():
        # eager: Gemma 2's attention softcapping exists only there (sdpa would skip it)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    state = {n: src.get(n).float() for n in src.names}
    # MoE checkpoints keep one tensor per expert; the model holds them fused (transformers 5)
    state = experts.fuse(config.model_type, config.to_dict(), state)
    rt = {"f16": torch.float16, "bf16": torch.bfloat16}.get(emulate)
    if rt is not None:
        # what the GGUF holds at the low type (gguf.tensor_plan): not the F32 routers, expert
        # biases, conv1d; fused experts (3-D) too. Expert matmuls are no nn.Linear: their
        # inputs stay unrounded, so an MoE emulation is close, not exact
        state = {n: t.to(rt).float() if t.dim() >= 2 and "conv1d" not in n and
                 not n.endswith(("_bias", "gate.weight", "router.weight")) else t
                 for n, t in state.items()}
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                m.register_forward_pre_hook(lambda _m, args: (args[0].to(rt).float(),))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:   # else weights left uninitialised
        raise RuntimeError(f"the exported tensors do not fit {config_dir}/config.json's model: "
                           f"missing {sorted(set(missing) - {'lm_head.weight'})}, unexpected "
                           f"{sorted(unexpected)}; the export wrote another architecture.")
    model.tie_weights()
    return model


def hf_greedy(model, ids: list[int], n: int = N_NEW) -> list[int]:
    import torch

    out, cache, x = [], None, torch.tensor([ids])
    with torch.no_grad():
        for _ in range(n):
            r = model(input_ids=x, cache=cache, use_cache=True)   # transformers 5: `cache`
            cache, nxt = r.cache, int(r.logits[0, -1].argmax())
            out.append(nxt)
            x = torch.tensor([[nxt]])
    return out


def threads(nbytes: int) -> int:
    """One thread for small models: ggml's and torch's worker threads spin-wait, and on a busy
    machine two threads decode a tiny model ~100x slower than one (measured here)."""
    return 1 if nbytes < SMALL else (os.cpu_count() or 1)


def llama(path: Path, lora: Path | None = None):
    import llama_cpp

    n = threads(path.stat().st_size)
    return llama_cpp.Llama(model_path=str(path), lora_path=str(lora) if lora else None,
                           n_ctx=512, n_batch=512, n_threads=n, n_threads_batch=n, logits_all=True,
                           type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32,
                           flash_attn=False, seed=0, verbose=False)


def llama_greedy(llm, ids: list[int], n: int = N_NEW) -> list[int]:
    llm.reset()
    llm.eval(ids)
    out = []
    for _ in range(n):
        nxt = int(llm.scores[llm.n_tokens - 1].argmax())
        out.append(nxt)
        llm.eval([nxt])
    return out


def agreement(a: list[list[int]], b: list[list[int]]) -> dict:
    """Identical decodes, and the mean share of each decode before the first differing token."""
    prefix = []
    for x, y in zip(a, b):
        k = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
        prefix.append(k / max(len(x), 1))
    return {"identical": sum(x == y for x, y in zip(a, b)), "of": len(a),
            "prefix_agreement": round(sum(prefix) / len(prefix), 4)}


def exact(got: list[list[int]], want: list[list[int]], ps, model) -> dict:
    """agreement() plus, for each decode that differs, the reference model's logit margin
    between the two tokens where they part: below TIE it is a float near-tie (either token is
    right within rounding noise), which is reported and not counted as a failure."""
    import torch

    a = agreement(got, want)
    a["near_ties"], a["ok"] = [], True
    for i, (g, w) in enumerate(zip(got, want)):
        if g == w:
            continue
        k = next(j for j, (x, y) in enumerate(zip(g, w)) if x != y)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ps[i] + w[:k]])).logits[0, -1]
        margin = float(abs(logits[w[k]] - logits[g[k]]))
        if margin < TIE:
            a["near_ties"].append({"prompt": i, "at": k, "margin": margin})
        else:
            a["ok"] = False
    return a


def verify_export(out: Path, manifest: dict, src: dict) -> dict:
    import torch
    from transformers import AutoTokenizer

    from mens.export.gguf import write_model_gguf
    from mens.export.merge import MergedWeights, SafetensorsDir
    from mens.export.modelfile import check_modelfile

    res: dict = {"failed": [], "gguf": {}}
    fail = res["failed"].append
    files = {f["path"]: f for f in manifest["files"]}
    config_dir = src["config_dir"]
    tok = AutoTokenizer.from_pretrained(str(config_dir))
    merged_dir = out / "merged"
    merged = SafetensorsDir(merged_dir) if merged_dir.is_dir() else \
        MergedWeights(SafetensorsDir(src["weights"]), src["adapter"], manifest["merge"]["dtype"],
                      src["qlora"])
    torch.set_num_threads(threads(2 * sum(math.prod(v) for v in merged.shapes.values())))
    ps = prompts(src["spoke"], tok)
    ref_model = hf_model(config_dir, merged)
    ref = [hf_greedy(ref_model, p) for p in ps]                      # merged, fp32 compute
    res["prompts"] = len(ps)
    with tempfile.TemporaryDirectory(prefix="mens-verify-") as tmp:
        f32 = out / "model-f32.gguf"
        if not f32.is_file():                         # verify makes its own f32 reference GGUF
            f32 = write_model_gguf(merged, config_dir, Path(tmp) / "model-f32.gguf", "f32", "ref")
        llm = llama(f32)
        res["tokenizer"] = tok_check(llm, tok)
        res["tokenizer_specials"] = tok_check(llm, tok, tok_texts(tok))
        for k in ("tokenizer", "tokenizer_specials"):
            if res[k]["identical"] != res[k]["of"]:
                fail(f"{k}: {res[k]['first_mismatch']}")
        got = [llama_greedy(llm, p) for p in ps]
        res["gguf"]["f32"] = a = exact(got, ref, ps, ref_model)
        if not a["ok"]:
            fail(f"f32 GGUF vs transformers: {a['identical']}/{a['of']} identical")
        del llm
        for t in manifest["gguf_types"]:
            if t == "f32":
                continue
            llm = llama(out / f"model-{t}.gguf")
            got = [llama_greedy(llm, p) for p in ps]
            del llm
            if t in ("f16", "bf16"):
                emu = hf_model(config_dir, merged, emulate=t)
                res["gguf"][t] = a = exact(got, [hf_greedy(emu, p) for p in ps], ps, emu)
                a["against"] = f"transformers, {t}-rounded weights and matmul inputs"
                if not a["ok"]:
                    fail(f"{t} GGUF vs {t}-rounded transformers: {a['identical']}/{a['of']}")
            else:
                res["gguf"][t] = a = agreement(got, ref)
                a["against"] = "transformers fp32 on the merged weights (reported, not required)"
        if src["adapter"] is not None:
            _adapter_checks(res, out, manifest, src, ps, ref, Path(tmp))
    from mens.export.modelfile import hermes_reference
    ref = hermes_reference(config_dir) if src.get("tool_format") == "hermes" else None
    for f in [p for p, e in files.items() if e["kind"] == "modelfile"]:
        m = check_modelfile(out / f, tok, reference=ref)
        res.setdefault("modelfile", {})[f] = m
        if m["missing_files"] or m["template_mismatches"] or not m["stops_are_tokens"]:
            fail(f"{f}: {m}")
    res["ok"] = not res["failed"]
    return res


def _adapter_checks(res, out, manifest, src, ps, ref, tmp: Path) -> None:
    """Base vs merged differ; llama.cpp base + adapter.gguf == PEFT base + adapter."""
    from peft import PeftModel

    from mens.export.gguf import write_model_gguf
    from mens.export.merge import MergedWeights, SafetensorsDir

    fail = res["failed"].append
    base = MergedWeights(SafetensorsDir(src["weights"]), None, "fp32", src["qlora"])
    base_tokens = [hf_greedy(hf_model(src["config_dir"], base), p) for p in ps]
    d = agreement(base_tokens, ref)
    res["merged_vs_base"] = {"differing": d["of"] - d["identical"], "of": d["of"],
                             "prefix_agreement": d["prefix_agreement"]}
    if d["identical"] == d["of"]:
        fail("the merged model's greedy output equals the base's on every prompt: the adapter "
             "changed nothing visible")
    peft = PeftModel.from_pretrained(hf_model(src["config_dir"], base),
                                     str(src["adapter"].path)).eval()
    want = [hf_greedy(peft, p) for p in ps]
    res["merged_dir_vs_exact_merge"] = agreement(ref, want)    # the merged dtype's rounding
    adapter = out / "adapter.gguf"
    if not adapter.is_file():
        return
    base_f32 = write_model_gguf(base, src["config_dir"], tmp / "base-f32.gguf", "f32", "base")
    llm = llama(base_f32, lora=adapter)
    res["adapter_gguf"] = a = exact([llama_greedy(llm, p) for p in ps], want, ps, peft)
    a["against"] = "PEFT base + adapter (fp32), i.e. the exact merge"
    del llm
    if not a["ok"]:
        fail(f"base f32 GGUF + adapter.gguf vs PEFT: {a['identical']}/{a['of']} identical")
    if manifest.get("base_gguf"):
        llm = llama(out / f"base-{manifest['base_gguf']}.gguf", lora=adapter)
        res["adapter_gguf_on_exported_base"] = b = agreement(
            [llama_greedy(llm, p) for p in ps], want)
        b["base"] = manifest["base_gguf"]


def tok_texts(tok) -> list[str]:
    """Texts with the tokenizer's own special tokens and a chat-rendered probe (each family has
    its own specials: <|eot_id|>, <start_of_turn>, [INST] ...), beside the fixed TEXTS."""
    from mens.export.modelfile import PROBES

    out = ["x" + "y".join(tok.all_special_tokens) + "z"]
    if tok.chat_template:
        try:
            out.append(tok.apply_chat_template(PROBES[1], tokenize=False,
                                               add_generation_prompt=True))
        except Exception:     # noqa: BLE001 — a chat template that refuses the system turn
            out.append(tok.apply_chat_template(PROBES[0], tokenize=False,
                                               add_generation_prompt=True))
    return out


def tok_check(llm, tok, texts=TEXTS) -> dict:
    n, first = 0, None
    for text in texts:
        for special in (True, False):
            want = tok(text, add_special_tokens=special).input_ids
            got = llm.tokenize(text.encode(), add_bos=special, special=True)
            n += got == want
            if got != want and first is None:
                first = f"{text!r}: llama.cpp {got} vs transformers {want}"
    return {"identical": n, "of": 2 * len(texts), "first_mismatch": first}


def report_lines(res: dict) -> list[str]:
    t = res["tokenizer"]
    lines = [f"token ids identical on {t['identical']}/{t['of']} texts (special tokens included)"]
    for k, a in res["gguf"].items():
        lines.append(f"{k:>6} GGUF greedy {N_NEW} tokens: {a['identical']}/{a['of']} identical, "
                     f"prefix agreement {a['prefix_agreement']:.0%}{_ties(a)}"
                     + (f" (vs {a['against']})" if "against" in a else ""))
    if "merged_vs_base" in res:
        m = res["merged_vs_base"]
        lines.append(f"merged differs from base on {m['differing']}/{m['of']} prompts")
    for k in ("adapter_gguf", "adapter_gguf_on_exported_base", "merged_dir_vs_exact_merge"):
        if k in res:
            a = res[k]
            lines.append(f"{k}: {a['identical']}/{a['of']} identical, prefix agreement "
                         f"{a['prefix_agreement']:.0%}{_ties(a)}")
    lines.append("OK" if res["ok"] else "FAILED: " + "; ".join(res["failed"]))
    return lines


def _ties(a: dict) -> str:
    t = a.get("near_ties")
    if not t:
        return ""
    return f", {len(t)} parted at a near-tie (margin {max(x['margin'] for x in t):.1e})"
