"""Packing is loss-exact: a packed row's per-record losses equal running each record alone.

A tiny random-weight Qwen3 (fp32, eval) and a tiny byte-level BPE tokenizer built here, so the
tests need no download and run in seconds.
"""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from mens.data.pack import (CHATML, IGNORE, Example, block_causal_mask, collate, mask_dtype_for, pack,
                       packing_stats, pad_batch, tokenize_chat)

SEQ = 192
WORDS = ("the model learns to call tools and plan steps before it answers a user question "
         "with code tests files search results python error fix run").split()


def make_tokenizer():
    """A byte-level BPE (GPT-2 style pre-tokenizer, like Qwen's) with the two ChatML tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    corpus = [CHATML.format(role=r, content=" ".join(WORDS)) for r in ("user", "assistant", "system")]
    tok.train_from_iterator(corpus * 4, trainer)
    return tok


@pytest.fixture(scope="module")
def raw_tok():
    return make_tokenizer()


@pytest.fixture(scope="module")
def tok(raw_tok):
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast(tokenizer_object=raw_tok)


def chat(rng: random.Random, n_words: int, turns: int = 1) -> list[dict]:
    msgs = [{"role": "system", "content": "you are a tool user"}]
    for _ in range(turns):
        msgs.append({"role": "user", "content": " ".join(rng.choices(WORDS, k=n_words))})
        msgs.append({"role": "assistant", "content": " ".join(rng.choices(WORDS, k=n_words + 2))})
    return msgs


def make_examples(tok) -> list[Example]:
    rng = random.Random(0)
    out = []
    # (user words, turns): 12 records of 42-76 tokens; at SEQ FFD packs 4 rows x 3 distinct lengths.
    spec = [(1, 1), (3, 1), (0, 2), (0, 1), (2, 1), (1, 1), (4, 1), (2, 1), (0, 1), (5, 1), (0, 1), (2, 1)]
    for i, (n, turns) in enumerate(spec):
        ids, labels = tokenize_chat(tok, chat(rng, n, turns))
        out.append(Example(ids, labels, phase=0, record_id=i))
    return out


@pytest.fixture(scope="module")
def examples(tok):
    return make_examples(tok)


def qwen(attn: str):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(0)
    # initializer_range 0.1 (HF default 0.02): sharper attention, so the leak control below is
    # far above noise (min leak ~0.3 nats vs ~3e-4 at 0.02); exactness holds either way.
    cfg = Qwen3Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      max_position_embeddings=512, initializer_range=0.1, attn_implementation=attn)
    return Qwen3ForCausalLM(cfg).float().eval()


@pytest.fixture(scope="module")
def zoo(examples):
    """attn → (model, per-record reference losses from running each record alone); built once.

    One torch thread while these tests run: the model is tiny, and intra-op threads fighting
    other processes for a few cores made these tests several times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    cache: dict = {}

    def get(attn: str):
        if attn not in cache:
            model = qwen(attn)
            cache[attn] = model, alone(model, examples)
        return cache[attn]
    yield get
    torch.set_num_threads(threads)


def token_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """HF's causal shift: logits[:, t-1] predict labels[:, t]. (B, S, V), (B, S) → (B, S-1).

    Summed in float64 so that comparing sums of ~50 token losses at atol 1e-5 tests the model's
    fp32 logits, not float32 rounding of the sum (one ulp at 70 is 7.6e-6)."""
    return F.cross_entropy(logits[:, :-1].double().transpose(1, 2), labels[:, 1:], ignore_index=IGNORE,
                           reduction="none")


def per_record(rows, logits, labels) -> dict:
    """Sum of token losses per record id, attributing each target token to its record."""
    seg = torch.tensor([r.segment_ids for r in rows])[:, 1:]                     # (B, S-1)
    tl = token_losses(logits, labels)                                            # (B, S-1)
    return {rid: tl[b][seg[b] == k + 1].sum().item()
            for b, r in enumerate(rows) for k, rid in enumerate(r.record_ids)}


def alone(model, examples) -> dict:
    out = {}
    with torch.no_grad():
        for ex in examples:
            ids = torch.tensor([ex.input_ids])
            out[ex.record_id] = token_losses(model(ids).logits, torch.tensor([ex.labels])).sum().item()
    return out


# ---------------------------------------------------------------------------- tokenisation

def test_piecewise_tokenisation_matches_whole_string_and_hf_and_raw_agree(tok, raw_tok):
    msgs = chat(random.Random(1), 6, turns=2)
    ids, labels = tokenize_chat(tok, msgs)
    whole = "".join(CHATML.format(**m) for m in msgs)
    assert ids == tok.encode(whole, add_special_tokens=False)
    assert (ids, labels) == tokenize_chat(raw_tok, msgs)
    assert len(ids) == len(labels)


def test_labels_only_on_assistant_content_and_im_end(tok):
    msgs = chat(random.Random(2), 5, turns=2)
    ids, labels = tokenize_chat(tok, msgs)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    learned = [t for t in labels if t != IGNORE]
    want = []
    for m in msgs:
        if m["role"] == "assistant":
            want += tok.encode(m["content"], add_special_tokens=False) + [im_end]
    assert learned == want
    assert all(l in (IGNORE, i) for i, l in zip(ids, labels))
    assert tok.decode(learned).count("<|im_end|>") == 2  # one stop per assistant turn


def test_tokenize_truncation_is_counted(tok):
    msgs = chat(random.Random(3), 8)
    full, _ = tokenize_chat(tok, msgs)
    stats: dict = {}
    ids, labels = tokenize_chat(tok, msgs, max_len=10, stats=stats)
    assert ids == full[:10] and len(labels) == 10
    assert stats == {"truncated_records": 1, "truncated_tokens": len(full) - 10}
    tokenize_chat(tok, msgs, max_len=10_000, stats=stats)
    assert stats == {"truncated_records": 1, "truncated_tokens": len(full) - 10}
    fresh: dict = {}
    assert tokenize_chat(tok, msgs, max_len=None, stats=fresh)[0] == full
    assert fresh == {"truncated_records": 0, "truncated_tokens": 0}


# ---------------------------------------------------------------------------- packing

def ex(n: int, phase: int = 0, rid=None) -> Example:
    return Example(list(range(1, n + 1)), list(range(1, n + 1)), phase, rid if rid is not None else n)


def naive(lengths: list[int], seq_len: int) -> int:
    """Sequential packing: start a new row whenever the next record does not fit."""
    rows, free = 0, 0
    for n in lengths:
        if n > free:
            rows, free = rows + 1, seq_len
        free -= n
    return rows


def test_ffd_beats_sequential_and_is_deterministic():
    lengths = [6, 5, 4, 5]
    rows = pack([ex(n, rid=i) for i, n in enumerate(lengths)], seq_len=10)
    assert naive(lengths, 10) == 3 and len(rows) == 2
    assert [r.record_ids for r in rows] == [[0, 2], [1, 3]]  # ties (the two 5s) in input order
    assert packing_stats(rows)["padded_tokens"] == 0
    again = pack([ex(n, rid=i) for i, n in enumerate(lengths)], seq_len=10)
    assert [r.input_ids for r in again] == [r.input_ids for r in rows]


def test_ffd_matches_reference_first_fit_scan():
    """The segment-tree first fit places every record where a plain left-to-right scan would."""
    rng = random.Random(5)
    items = [ex(rng.randint(1, 40), rid=i) for i in range(400)]
    order = sorted(range(len(items)), key=lambda i: (-len(items[i]), i))
    bins, room = [], []
    for i in order:
        b = next((k for k, r in enumerate(room) if r >= len(items[i])), None)
        if b is None:
            bins, room, b = bins + [[]], room + [64], len(bins)
        bins[b].append(i)
        room[b] -= len(items[i])
    assert [r.record_ids for r in pack(items, seq_len=64)] == bins


def reference_phase_pack(items: list[Example], seq_len: int, window) -> list[list]:
    """A plain scan of what pack() promises: longest first; the nearest phase's rows (own
    phase first, the earlier on a tie, at most `window` away), leftmost row with room."""
    phases = sorted({e.phase for e in items})
    rows: dict = {p: [] for p in phases}                       # phase → [[room, [ids]]]
    for i in sorted(range(len(items)), key=lambda i: (-len(items[i]), i)):
        n, home = len(items[i]), phases.index(items[i].phase)
        reach = len(phases) if window is None else window
        near = [phases[k] for d in range(reach + 1) for k in dict.fromkeys((home - d, home + d))
                if 0 <= k < len(phases)]
        row = next((r for q in near for r in rows[q] if r[0] >= n), None)
        if row is None:
            row = [seq_len, []]
            rows[items[i].phase].append(row)
        row[0] -= n
        row[1].append(items[i].record_id)
    return [r[1] for p in phases for r in rows[p]]


@pytest.mark.parametrize("window", [None, 0, 1])
def test_phase_aware_packing_matches_its_reference_and_keeps_phase_order(window):
    rng = random.Random(4)
    items = [ex(rng.randint(1, 9) if rng.random() < .6 else rng.randint(9, 15),
                phase=rng.randint(0, 3), rid=i) for i in range(80)]
    rows = pack(items, seq_len=16, window=window)
    assert [r.record_ids for r in rows] == reference_phase_pack(items, 16, window)
    phases = [r.phase for r in rows]
    assert phases == sorted(phases) and set(phases) == {0, 1, 2, 3}
    assert sorted(rid for r in rows for rid in r.record_ids) == list(range(80))
    by_id = {e.record_id: e.phase for e in items}
    far = max(abs(by_id[rid] - r.phase) for r in rows for rid in r.record_ids)
    assert far <= (3 if window is None else window)
    if window == 0:
        assert far == 0     # 0: every row holds one phase's records


def test_packing_across_phases_wastes_less_than_phases_apart():
    """Each phase's long records leave room only another phase's short ones can fill."""
    items = [ex(12, phase=p, rid=f"{p}-long-{k}") for p in (0, 1) for k in range(4)] + \
            [ex(4, phase=2, rid=f"short-{k}") for k in range(8)]
    apart, across = pack(items, 16, window=0), pack(items, 16)
    assert len(apart) == 8 + 2 and len(across) == 8
    assert packing_stats(across)["padded_tokens"] == 0
    assert [r.phase for r in across] == [0] * 4 + [1] * 4   # the short ones fill both phases' rows


def test_row_layout_and_padding_waste():
    rows = pack([ex(3, rid="a"), ex(2, rid="b"), ex(4, rid="c")], seq_len=12)
    (row,) = rows
    assert row.record_ids == ["c", "a", "b"]
    assert row.segment_ids == [1] * 4 + [2] * 3 + [3] * 2 + [0] * 3
    assert row.position_ids == [0, 1, 2, 3, 0, 1, 2, 0, 1, 0, 1, 2]
    assert row.labels == [IGNORE, 2, 3, 4, IGNORE, 2, 3, IGNORE, 2] + [IGNORE] * 3
    s = packing_stats(pack([ex(3), ex(5), ex(7)], seq_len=8))  # 7 | 5+3: 2 rows, 1 pad slot
    assert s == {"rows": 2, "records": 3, "real_tokens": 15, "padded_tokens": 1,
                 "padding_waste_pct": pytest.approx(100 / 16), "label_tokens": 12,
                 "truncated_records": 0, "truncated_tokens": 0}


def test_pack_and_pad_batch_count_truncation():
    rows = pack([ex(20, rid="long"), ex(3, rid="short")], seq_len=8)
    s = packing_stats(rows)
    assert (s["truncated_records"], s["truncated_tokens"], s["rows"]) == (1, 12, 2)
    assert rows[0].input_ids == list(range(1, 9))
    stats: dict = {}
    b = pad_batch([ex(20), ex(3)], seq_len=8, stats=stats)
    assert stats == {"truncated_records": 1, "truncated_tokens": 12}
    assert b["input_ids"].shape == (2, 8)
    assert b["attention_mask"].tolist()[1] == [1, 1, 1, 0, 0, 0, 0, 0]
    assert b["labels"].tolist()[1] == [IGNORE, 2, 3] + [IGNORE] * 5


def test_collate_labels_exactly_assistant_minus_starts_and_padding(tok, examples):
    rows = pack(examples, seq_len=SEQ)
    batch = collate(rows)
    by_id = {e.record_id: e for e in examples}
    for b, row in enumerate(rows):
        want = []
        for rid in row.record_ids:
            want += [IGNORE] + by_id[rid].labels[1:]
        want += [IGNORE] * (SEQ - len(want))
        assert batch["labels"][b].tolist() == want
    assert batch["input_ids"].dtype == batch["labels"].dtype == torch.long
    assert batch["attention_mask"].shape == (len(rows), 1, SEQ, SEQ)
    assert batch["attention_mask"].dtype == torch.bool


def test_block_mask_shape_padding_and_float_form():
    seg = torch.tensor([[1, 1, 2, 2, 2, 0, 0]])
    m = block_causal_mask(seg)[0, 0]
    assert m[3].tolist() == [False, False, True, True, False, False, False]
    assert m[6].tolist() == [False] * 6 + [True]            # padding sees only itself
    assert m.any(-1).all()                                  # no all-masked softmax row
    f = block_causal_mask(seg, torch.float32)[0, 0]
    assert torch.equal(f == 0, m) and (f[~m] == torch.finfo(torch.float32).min).all()


# ---------------------------------------------------------------------------- the key test

@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_loss_equals_per_record_loss_and_causal_mask_leaks(attn, examples, zoo):
    model, ref = zoo(attn)
    rows = pack(examples, seq_len=SEQ)
    assert all(len(r.record_ids) >= 3 and 0 in r.segment_ids for r in rows)   # 3+ records, padded
    assert all(len({len(examples[i]) for i in r.record_ids}) == 3 for r in rows)  # different lengths
    dtype = mask_dtype_for(model)
    assert dtype == (None if attn == "sdpa" else torch.float32)
    batch = collate(rows, mask_dtype=dtype)
    with torch.no_grad():
        out = model(**batch)
    packed = per_record(rows, out.logits, batch["labels"])
    assert packed.keys() == ref.keys()
    for rid in ref:
        assert packed[rid] == pytest.approx(ref[rid], abs=1e-5), rid
    # HF's own (mean) loss over the packed batch agrees with the per-record sums.
    n_label = sum(sum(1 for t in e.labels[1:] if t != IGNORE) for e in examples)
    assert out.loss.item() == pytest.approx(sum(ref.values()) / n_label, abs=1e-5)

    # CONTROL: one causal mask over the whole row (position resets kept) leaks across records.
    S = batch["input_ids"].shape[1]
    causal = torch.ones(S, S, dtype=torch.bool).tril().expand(len(rows), 1, S, S)
    leaky_mask = causal if dtype is None else torch.zeros(causal.shape, dtype=dtype).masked_fill(
        ~causal, torch.finfo(dtype).min)
    with torch.no_grad():
        leaky = per_record(rows, model(**{**batch, "attention_mask": leaky_mask}).logits,
                           batch["labels"])
    for row in rows:
        first, *later = row.record_ids
        assert leaky[first] == pytest.approx(ref[first], abs=1e-5)   # nothing before it to see
        for rid in later:
            assert abs(leaky[rid] - ref[rid]) > 1e-3, rid


def test_record_start_label_masked_so_no_loss_crosses_records(examples, zoo):
    """Fully-labelled records (pretraining style): without -100 on each record's first token,
    the packed loss would score it as predicted from the previous record's last token."""
    model, _ = zoo("sdpa")
    full = [Example(e.input_ids, list(e.input_ids), 0, e.record_id) for e in examples]
    rows = pack(full, seq_len=SEQ)
    batch = collate(rows)
    with torch.no_grad():
        out = model(**batch)
    packed, ref = per_record(rows, out.logits, batch["labels"]), alone(model, full)
    for rid in ref:
        assert packed[rid] == pytest.approx(ref[rid], abs=1e-5), rid
    n_label = sum(len(e) - 1 for e in full)
    assert out.loss.item() == pytest.approx(sum(ref.values()) / n_label, abs=1e-5)


def test_bool_mask_under_eager_is_wrong_hence_mask_dtype(examples, zoo):
    """Eager *adds* the mask to the scores: a bool mask adds +1/0 and masks nothing."""
    model, ref = zoo("eager")
    rows = pack(examples, seq_len=SEQ)
    batch = collate(rows)  # bool
    with torch.no_grad():
        got = per_record(rows, model(**batch).logits, batch["labels"])
    assert max(abs(got[k] - ref[k]) for k in ref) > 1e-3


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_pad_batch_loss_equals_per_record_loss(attn, examples, zoo):
    model, ref = zoo(attn)
    batch = pad_batch(examples, seq_len=SEQ)
    with torch.no_grad():
        tl = token_losses(model(**batch).logits, batch["labels"])              # (B, S-1)
    for b, e in enumerate(examples):
        assert tl[b].sum().item() == pytest.approx(ref[e.record_id], abs=1e-5)


def test_mask_dtype_for_refuses_flash():
    class Cfg:
        _attn_implementation = "flash_attention_2"

    class Model:
        config = Cfg()
    with pytest.raises(ValueError, match="flash_attention_2"):
        mask_dtype_for(Model())
    with pytest.raises(ValueError, match="flash_attention_2"):
        mask_dtype_for(Cfg())


def test_mask_dtype_for_takes_model_or_config(zoo):
    for attn, want in (("sdpa", None), ("eager", torch.float32)):
        model, _ = zoo(attn)
        assert mask_dtype_for(model) == mask_dtype_for(model.config) == want
