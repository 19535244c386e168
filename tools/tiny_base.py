"""Build the embedded `tiny` rung, mens/assets/tiny: a real Qwen3ForCausalLM and its own tokenizer.

    python tools/tiny_base.py

1. Corpus (mens/assets/corpora/pretrain/corpus.txt, <= 3 MB): Python's own documentation and standard-library
   source (PSF-licensed, read from the running interpreter) plus a seeded sample of the spokes'
   TRAINING records as plain text (no ChatML framing). No eval split (eval*.jsonl) is ever read.
2. Tokenizer: byte-level BPE trained with `tokenizers` on the corpus plus every spoke training text,
   with Qwen2/Qwen3's pre-tokenizer (the Split regex below, then ByteLevel without its regex) so a
   GGUF export may declare `pre = qwen2`. No normalizer (Qwen's HF tokenizer has NFC; llama.cpp
   applies none, and without it decode(encode(x)) == x for any x). 4093 learned tokens (256 bytes +
   merges), then the specials at the END like Qwen: <|endoftext|> 4093 (pad), <|im_start|> 4094,
   <|im_end|> 4095 (eos).
3. Model: Qwen3ForCausalLM with conf/rung/tiny.yaml's numbers, seeded init, full-parameter
   pretraining (AdamW, warmup + cosine, packed causal LM, seq_len 512) for a fixed step count.
4. Assets: config, generation config, bf16 safetensors, tokenizer files, README.md, SHA256SUMS.

Deterministic: fixed seed, fixed thread count, fixed step count; the stdlib part depends on the
interpreter's version (recorded in the README and in mens/assets/corpora/pretrain/sources.json).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import random
import sys
import sysconfig
import time
from pathlib import Path

import torch
import yaml
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ASSETS = ROOT / "mens" / "assets" / "tiny"
DATA = ROOT / "mens" / "assets" / "corpora"
PRETRAIN = DATA / "pretrain"
RUNG = ROOT / "conf" / "rung" / "tiny.yaml"

SEED = 0
THREADS = 1                    # bit-reproducible anywhere; no spin-waiting on a shared CPU
# transformers/models/qwen2/tokenization_qwen2.py PRETOKENIZE_REGEX (Qwen2 and Qwen3 share it).
QWEN2_PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
             r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")     # ids 4093, 4094, 4095
EOT, IM_START, IM_END = SPECIALS
# ChatML as mens renders it (mens.data.chat_template.CHATML): every message, in order, as
# <|im_start|>{role}\n{content}<|im_end|>\n (exactly what mens.data.pack.tokenize_chat encodes),
# plus Qwen's tool branch (schemas in the system turn, calls as <tool_call> JSON blocks).
from mens.data.chat_template import CHATML as CHAT_TEMPLATE  # noqa: E402

CORPUS_BYTES = 3_000_000       # corpus.txt cap (UTF-8)
SPOKE_BYTES = 250_000          # spoke training texts, split equally between spokes; the rest of the
                               # corpus is Python docs and stdlib source
STDLIB_SKIP = ("test", "idlelib", "tkinter", "turtledemo", "lib2to3", "ensurepip", "encodings",
               "site-packages", "config-", "_sysconfigdata", "pydoc_data", "__phello__")
HELDOUT_FILES = 8              # stdlib files kept out of the corpus to measure held-out loss
SEQ, BATCH, STEPS, WARMUP = 512, 8, 600, 30
LR, LR_MIN, WD = 2e-3, 2e-4, 0.1


# ----------------------------------------------------------------------------- corpus
def stdlib_docs() -> list[tuple[str, str]]:
    """(name, text): the language reference topics (prose) and stdlib modules, sorted by name."""
    from pydoc_data.topics import topics

    docs = [(f"pydoc_data/topics.py:{k}", topics[k].strip() + "\n") for k in sorted(topics)]
    lib = Path(sysconfig.get_paths()["stdlib"])
    for f in sorted(lib.rglob("*.py")):
        rel = f.relative_to(lib).as_posix()
        if any(p.startswith(STDLIB_SKIP) for p in rel.split("/")) or f.stat().st_size > 150_000:
            continue
        text = f.read_text(encoding="utf-8", errors="replace")
        if len(text) > 500 and EOT not in text:
            docs.append((rel, text))
    return docs


def render_plain(messages: list[dict]) -> str:
    """A chat record as plain text: its turns' contents, blank-line separated, no ChatML."""
    return "\n\n".join(m["content"].strip() for m in messages if m.get("content")) + "\n"


def record_messages(rec: dict) -> list[dict]:
    """The messages of one training record; a preference pair gives prompt + chosen."""
    return rec["prompt"] + rec["chosen"] if "prompt" in rec else rec["messages"]


def spoke_records() -> dict[str, list[list[dict]]]:
    """{spoke: [messages]}: every record of mens/assets/corpora/<spoke>/*.jsonl except eval*.jsonl files and
    records whose split includes eval (validated by mens.data.corpus.load_jsonl)."""
    from mens.data.corpus import load_jsonl

    out: dict[str, list[list[dict]]] = {}
    for d in sorted(p for p in DATA.iterdir() if p.is_dir() and p.name != "pretrain"):
        recs = [record_messages(r) for f in sorted(d.glob("*.jsonl"))
                if not f.name.startswith("eval") for r in load_jsonl(f) if "eval" not in r["split"]]
        if recs:
            out[d.name] = recs
    return out


def build_corpus(spokes: dict[str, list[list[dict]]]) -> tuple[list[str], list[dict], list[str]]:
    """(corpus docs, their sources, held-out stdlib texts). Seeded choices, byte-capped."""
    rng = random.Random(SEED)
    docs, sources, spoke_docs = [], [], []
    for name, recs in spokes.items():               # a seeded sample, equal bytes per spoke
        budget = SPOKE_BYTES // len(spokes)
        for i in rng.sample(range(len(recs)), len(recs)):
            text = render_plain(recs[i])
            if (n := len(text.encode()) + len(EOT) + 1) <= budget:
                spoke_docs.append((f"spoke:{name}", text))
                budget -= n
    rng.shuffle(spoke_docs)
    std = stdlib_docs()
    prose = [d for d in std if d[0].startswith("pydoc_data")]
    code = [d for d in std if not d[0].startswith("pydoc_data")]
    rng.shuffle(code)
    heldout, code = [t for _, t in code[:HELDOUT_FILES]], code[HELDOUT_FILES:]
    used = 0

    def take(items, budget):
        nonlocal used
        for name, text in items:
            n = len(text.encode()) + len(EOT) + 1
            if used + n > budget:
                continue
            docs.append(text)
            sources.append({"source": name, "bytes": n})
            used += n

    take(spoke_docs, SPOKE_BYTES)
    take(prose, CORPUS_BYTES)
    take(code, CORPUS_BYTES)
    order = list(range(len(docs)))
    rng.shuffle(order)                         # interleave prose, code and spoke texts
    return [docs[i] for i in order], [sources[i] for i in order], heldout


# ----------------------------------------------------------------------------- tokenizer
def train_tokenizer(texts: list[str], vocab: int):
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PAT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab - len(SPECIALS), min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], show_progress=False)
    tok.train_from_iterator(texts, trainer)
    if tok.get_vocab_size() != vocab - len(SPECIALS):
        raise SystemExit(f"BPE learned {tok.get_vocab_size()} tokens, want {vocab - len(SPECIALS)}")
    tok.add_special_tokens(list(SPECIALS))                  # appended: 4093, 4094, 4095
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, pad_token=EOT,
                                   bos_token=None, unk_token=None, chat_template=CHAT_TEMPLATE,
                                   model_max_length=4096, clean_up_tokenization_spaces=False)


# ----------------------------------------------------------------------------- model
def make_model(rung: dict, tok):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    eot, im_end = tok.convert_tokens_to_ids([EOT, IM_END])
    dims = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "head_dim",
            "num_attention_heads", "num_key_value_heads", "tie_word_embeddings",
            "max_position_embeddings")
    config = Qwen3Config(**{k: rung[k] for k in dims}, rope_theta=rung.get("rope_theta", 1e6),
                         rms_norm_eps=rung.get("rms_norm_eps", 1e-6),
                         bos_token_id=eot, eos_token_id=im_end)  # as Qwen3's: no pad_token_id
    torch.manual_seed(SEED)
    return Qwen3ForCausalLM(config)


def chunks(tok, docs: list[str]) -> torch.Tensor:
    """Docs, each followed by <|endoftext|>, concatenated and cut into (N, SEQ) rows."""
    eot = tok.convert_tokens_to_ids(EOT)
    encs = tok.backend_tokenizer.encode_batch(docs, add_special_tokens=False)
    stream = [i for enc in encs for i in enc.ids + [eot]]
    n = len(stream) // SEQ
    return torch.tensor(stream[: n * SEQ]).view(n, SEQ)                  # (N, SEQ)


def pretrain(model, rows: torch.Tensor, log) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=WD)

    def lr_at(step):
        if step < WARMUP:
            return LR * (step + 1) / WARMUP
        t = (step - WARMUP) / max(1, STEPS - WARMUP)
        return LR_MIN + 0.5 * (LR - LR_MIN) * (1 + math.cos(math.pi * t))

    g = torch.Generator().manual_seed(SEED)
    epochs = -(-STEPS * BATCH // len(rows))
    order = torch.cat([torch.randperm(len(rows), generator=g) for _ in range(epochs)])
    losses, t0 = [], time.time()
    model.train()
    for step in range(STEPS):
        batch = rows[order[step * BATCH:(step + 1) * BATCH]]             # (B, SEQ)
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        with torch.autocast("cpu", dtype=torch.bfloat16):   # bf16 matmuls, fp32 master weights
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % 25 == 0 or step == STEPS - 1:
            log(f"step {step:4d}  loss {loss.item():.3f}  lr {lr_at(step):.2e}  "
                f"{time.time() - t0:.0f}s")
    return losses


@torch.no_grad()
def eval_loss(model, rows: torch.Tensor) -> float:
    model.eval()
    return sum(model(input_ids=r[None], labels=r[None]).loss.item() for r in rows) / len(rows)


# ----------------------------------------------------------------------------- assets
def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_assets(model, tok, report: dict) -> None:
    from transformers import GenerationConfig

    ASSETS.mkdir(parents=True, exist_ok=True)
    for f in ASSETS.iterdir():
        f.unlink()
    model.config.use_cache = True
    model.to(torch.bfloat16).save_pretrained(ASSETS, safe_serialization=True)
    ids = tok.convert_tokens_to_ids(list(SPECIALS))
    GenerationConfig(bos_token_id=ids[0], eos_token_id=[ids[2], ids[0]], pad_token_id=ids[0],
                     do_sample=False).save_pretrained(ASSETS)
    tok.save_pretrained(ASSETS, save_jinja_files=False)   # chat_template in tokenizer_config.json
    cfg_path = ASSETS / "tokenizer_config.json"        # a class name transformers 4.x knows too
    tok_cfg = {**json.loads(cfg_path.read_text()), "tokenizer_class": "PreTrainedTokenizerFast"}
    write_atomic(cfg_path, json.dumps(tok_cfg, indent=2, ensure_ascii=False) + "\n")
    files = sorted(f.name for f in ASSETS.iterdir())
    for f in files:
        (ASSETS / f).chmod(0o644)                     # safetensors writes 0600; package data is 644
    sums = {f: sha256(ASSETS / f) for f in files}
    write_atomic(ASSETS / "README.md", readme(report, sums))
    sums["README.md"] = sha256(ASSETS / "README.md")
    write_atomic(ASSETS / "SHA256SUMS", "".join(f"{h}  {f}\n" for f, h in sorted(sums.items())))


def readme(r: dict, sums: dict) -> str:
    comp = "\n".join(f"| {k} | {v['docs']} | {v['bytes']:,} |" for k, v in r["composition"].items())
    hashes = "\n".join(f"    {h}  {f}" for f, h in sums.items())
    return f"""# mens/assets/tiny — the embedded `tiny` rung

A real `Qwen3ForCausalLM` ({r['params']:,} parameters; conf/rung/tiny.yaml: hidden 256,
intermediate 768, 4 layers, 4 heads / 2 KV heads, head_dim 64, vocab 4096, tied embeddings,
rope_theta 1e6) with mens's own byte-level BPE tokenizer, stored in bfloat16. It exists so that
mens runs end to end offline on any CPU; it is a test vehicle, not a useful assistant.

Rebuild (deterministic: seed {SEED}, {THREADS} CPU thread(s), fixed step count):

    python tools/tiny_base.py

## Tokenizer
Byte-level BPE trained with `tokenizers` on the pretraining corpus plus every spoke's training
texts (never an eval split). Pre-tokenizer = Qwen2/Qwen3's (`Split` with Qwen2's regex, isolated,
then `ByteLevel(use_regex=False)`), so a GGUF export declares `tokenizer.ggml.pre = qwen2`; no
normalizer. Vocabulary 4096: 4093 learned tokens, then the added special tokens
`<|endoftext|>` = 4093 (pad, document separator), `<|im_start|>` = 4094, `<|im_end|>` = 4095 (eos).
`chat_template` (tokenizer_config.json) is ChatML with Qwen2.5/Qwen3's tool branch (schemas in
the system turn, calls as `<tool_call>` JSON blocks; no think branch): mens.data.chat_template.CHATML.

## Pretraining corpus
mens/assets/corpora/pretrain/corpus.txt ({r['corpus_bytes']:,} bytes; documents separated by
`<|endoftext|>`); mens/assets/corpora/pretrain/sources.json lists each document's source.

| part | documents | bytes |
|---|---|---|
{comp}

Python documentation (`pydoc_data.topics`) and standard-library source are from Python
{r['python']} and are under the PSF License (Python Software Foundation License Version 2).
Spoke texts are a seeded sample of each spoke's training records ({SPOKE_BYTES:,} bytes split
equally between spokes) as plain text: message contents, no ChatML framing; a preference pair
gives prompt + chosen. eval.jsonl / eval_pairs.jsonl and records whose split includes eval are
never read. Records per spoke (in corpus / training records): {r['spoke_counts']}.
Spoke data: {r['spoke_state']}.

## Pretraining
Full-parameter, fp32 weights with bf16 autocast, AdamW (betas 0.9/0.95, wd {WD}), lr {LR} →
{LR_MIN} cosine after {WARMUP} warmup steps, {STEPS} steps × {BATCH} rows × {SEQ} tokens (packed
causal LM, {r['rows']} rows, {r['tokens']:,} corpus tokens ≈ {r['epochs']:.2f} epochs),
{r['seconds']:.0f} s on {THREADS} CPU thread(s) (wall time varies with the machine's load).
Loss {r['loss_start']:.3f} → {r['loss_end']:.3f} (last 20 steps' mean: {r['loss_last20']:.3f});
held-out stdlib source ({HELDOUT_FILES} files not in the corpus): {r['heldout_loss']:.3f}
(ln 4096 = {math.log(4096):.3f}).

## Files (sha256; SHA256SUMS also covers this README)
{hashes}
"""


def main() -> None:
    torch.set_num_threads(THREADS)
    log = lambda s: print(s, flush=True)
    rung = yaml.safe_load(RUNG.read_text())
    ready = (DATA / "CORPUS_READY").is_file()
    spokes = spoke_records() if DATA.is_dir() else {}
    counts = ", ".join(f"{k} {len(v)}" for k, v in spokes.items()) or "none"
    state = f"{'complete (CORPUS_READY)' if ready else 'PARTIAL (no CORPUS_READY)'}: {counts}"
    log(f"spokes: {state}")

    docs, sources, heldout = build_corpus(spokes)
    PRETRAIN.mkdir(parents=True, exist_ok=True)
    corpus = "".join(d + EOT + "\n" for d in docs)
    write_atomic(PRETRAIN / "corpus.txt", corpus)
    write_atomic(PRETRAIN / "sources.json", json.dumps(sources, indent=0) + "\n")
    comp: dict[str, dict] = {}
    for s in sources:
        k = s["source"] if s["source"].startswith("spoke:") else "python docs (pydoc topics)" \
            if s["source"].startswith("pydoc_data") else "python stdlib source"
        c = comp.setdefault(k, {"docs": 0, "bytes": 0})
        c["docs"], c["bytes"] = c["docs"] + 1, c["bytes"] + s["bytes"]
    log(f"corpus: {len(docs)} docs, {len(corpus.encode()):,} bytes")

    all_spoke = [render_plain(m) for recs in spokes.values() for m in recs]
    tok = train_tokenizer(docs + all_spoke, rung["vocab_size"])
    rows = chunks(tok, docs)
    held = chunks(tok, heldout)[:16]
    log(f"tokenizer: {len(tok)} tokens; corpus {rows.numel():,} tokens in {len(rows)} rows")

    model = make_model(rung, tok)
    t0 = time.time()
    losses = pretrain(model, rows, log)
    seconds = time.time() - t0
    report = {
        "params": sum(p.numel() for p in model.parameters()), "composition": comp,
        "corpus_bytes": len(corpus.encode()), "python": sys.version.split()[0],
        "spoke_state": state, "spoke_counts": ", ".join(
            f"{k} {comp.get('spoke:' + k, {}).get('docs', 0)}/{len(v)}" for k, v in spokes.items()),
        "rows": len(rows), "tokens": rows.numel(),
        "epochs": STEPS * BATCH / len(rows), "seconds": seconds, "loss_start": losses[0],
        "loss_end": losses[-1], "loss_last20": sum(losses[-20:]) / 20,
        "heldout_loss": eval_loss(model, held)}
    log(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; held-out {report['heldout_loss']:.3f}; "
        f"{seconds:.0f}s")
    write_assets(model, tok, report)
    log(f"wrote {ASSETS}")


if __name__ == "__main__":
    main()
