"""Chat records → token ids with assistant-only labels → packed rows → model-ready tensors.

Packing puts several records in one row of `seq_len` tokens. A packed row's per-record losses
equal those of running each record alone (tests/test_pack.py proves it on a real Qwen3) because:
  * a 4-D block-diagonal causal mask: no token attends across a record boundary;
  * label -100 on each record's first token: HF's causal-LM loss shifts labels (logits[t-1]
    predict labels[t]), so that label would be predicted from the *previous* record's last token;
  * position_ids restart at 0 per record. RoPE is relative, so given the mask this is exact in
    real arithmetic anyway; the reset keeps numerics identical to the unpacked run (no large
    absolute angles in bf16) and lets position-based varlen kernels (flash-attn) find records.

transformers 5.x (masking_utils._preprocess_mask_arguments) returns any 4-D attention_mask as
is, so the mask we build reaches the attention kernel untouched: SDPA takes a bool mask (True =
may attend); eager *adds* the mask to the scores, so it needs an additive float mask (a bool
one would silently add +1/0). `collate(rows, mask_dtype=...)` / `mask_dtype_for(model)`.
Why not rely on position_ids alone: 5.x infers packing from position resets only when
attention_mask is None AND there is no cache, but Qwen3 builds a DynamicCache whenever
use_cache (config default True, also in train mode), so the records silently leak.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

IGNORE = -100
CHATML = "<|im_start|>{role}\n{content}<|im_end|>\n"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"


def _encode(tokenizer, text: str) -> list[int]:
    # add_special_tokens=False: no BOS/EOS of the tokenizer's own; `<|im_start|>`/`<|im_end|>`
    # in the text are still matched as single added tokens.
    out = tokenizer.encode(text, add_special_tokens=False)
    return list(getattr(out, "ids", out))  # a raw `tokenizers.Tokenizer` returns an Encoding


def tokenize_chat(tokenizer, messages: Sequence[dict], max_len: int | None = None,
                  stats: dict | None = None) -> tuple[list[int], list[int]]:
    """ChatML-encode `messages` ([{role, content}]) piece by piece; loss only on assistant turns.

    Each message is three pieces: header `<|im_start|>{role}\\n`, content, footer
    `<|im_end|>\\n`. Special tokens split the text in any HF tokenizer, and Qwen's pre-tokenizer
    splits at the header's `\\n`, so the piecewise ids equal the ids of the whole rendered string
    (checked in tests) — and we know exactly which ids are assistant content.
    Labels: assistant content + its `<|im_end|>` (the model must learn to stop); the header
    (a prompt, not an answer) and the `\\n` after `<|im_end|>` (never generated: decoding stops at
    `<|im_end|>`) are -100, as is every non-assistant token.
    `max_len` keeps the first max_len tokens; `stats` (if given) counts truncated_records/_tokens.
    """
    ids: list[int] = []
    labels: list[int] = []
    end, nl = _encode(tokenizer, IM_END), _encode(tokenizer, "\n")
    for m in messages:
        role, content = m["role"], m["content"]
        head = _encode(tokenizer, f"{IM_START}{role}\n")
        body = _encode(tokenizer, content) if content else []
        learn = role == "assistant"
        ids += head + body + end + nl
        labels += [IGNORE] * len(head)
        labels += (body + end) if learn else [IGNORE] * (len(body) + len(end))
        labels += [IGNORE] * len(nl)
    dropped = max(0, len(ids) - max_len) if max_len is not None else 0
    _count(stats, dropped)
    return ids[:len(ids) - dropped], labels[:len(ids) - dropped]


def _count(stats: dict | None, dropped: int) -> None:
    # Keys exist (at 0) once any record went through, so telemetry always carries them.
    if stats is not None:
        stats["truncated_records"] = stats.get("truncated_records", 0) + (dropped > 0)
        stats["truncated_tokens"] = stats.get("truncated_tokens", 0) + dropped


@dataclass
class Example:
    input_ids: list[int]
    labels: list[int]          # same length; -100 where no loss
    phase: int = 0             # index into the curriculum's phases: packing buckets by it
    record_id: str | int = ""

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass
class Row:
    """One packed row, every list of length seq_len. segment_ids: 1..k per record, 0 = padding."""
    input_ids: list[int]
    labels: list[int]          # record starts and padding already -100
    position_ids: list[int]    # 0.. per record; padding counts 0.. as its own pseudo-record
    segment_ids: list[int]
    phase: int                 # the phase of the record that opened it (its longest)
    record_ids: list = field(default_factory=list)
    truncated_records: int = 0
    truncated_tokens: int = 0

    @property
    def real_tokens(self) -> int:
        return sum(1 for s in self.segment_ids if s)


def _clip(ex: Example, seq_len: int) -> tuple[list[int], list[int], int]:
    """Head-truncate to seq_len; first label -100 (see module docstring); (ids, labels, dropped)."""
    if len(ex.input_ids) != len(ex.labels):
        raise ValueError(f"record {ex.record_id!r}: {len(ex.input_ids)} ids but {len(ex.labels)} labels")
    ids, labels = list(ex.input_ids[:seq_len]), list(ex.labels[:seq_len])
    if labels:
        labels[0] = IGNORE
    return ids, labels, max(0, len(ex) - seq_len)


class _FirstFit:
    """Leftmost row with room >= n in O(log rows): a max segment tree over rows' free room.

    A plain scan of open rows is O(records x rows), minutes on a real dataset. Every leaf starts
    at seq_len, so "open a new row" is just the leftmost untouched leaf.
    """

    def __init__(self, seq_len: int, n_max: int):
        self.size = 1 << max(1, (n_max - 1).bit_length())
        self.room = [seq_len] * (2 * self.size)  # internal nodes: max room below them

    def find(self, n: int) -> int:
        """The leftmost row with room >= n (an untouched leaf: a new row)."""
        i = 1
        while i < self.size:
            i = 2 * i if self.room[2 * i] >= n else 2 * i + 1
        return i - self.size

    def place(self, n: int, b: int | None = None) -> int:
        """Put n tokens in row b (default: find(n)); returns b."""
        b = self.find(n) if b is None else b
        i = b + self.size
        self.room[i] -= n
        i //= 2
        while i:
            self.room[i] = max(self.room[2 * i], self.room[2 * i + 1])
            i //= 2
        return b


def pack(examples: Sequence[Example], seq_len: int, pad_id: int = 0,
         window: int | None = None) -> list[Row]:
    """First-fit-decreasing bin packing across the curriculum's phases, phase order kept.

    Records go longest first. A row belongs to the phase of the record that opened it (its
    longest); a record joins, of the rows with room for it, one of the nearest phase — its own
    first, then 1 phase away, 2, … up to `window` (None: any distance) — the leftmost of them
    (first fit), the earlier phase on a tie; none: it opens a row of its own phase. Rows come
    out in phase order, within a phase in the order they opened. With one phase this is plain
    FFD. Why across phases: a phase of long records leaves rows half empty that only another
    phase's short records can fill — vox_lang at its auto seq_len 1,152 (three_epoch, seven
    phases) wasted 11.1 % of its slots when rows took one phase (and the next one's spill), and
    2.9 % with any distance: 22 % of the real tokens then sit in a row of another phase, 0.47
    phases from their own on average (`curriculum.pack_window` bounds it; 0 keeps phases apart).

    Deterministic: sorted by (-length, original index), so equal lengths keep input order.
    Records longer than seq_len are head-truncated to seq_len (counted on their Row). Empty
    records are skipped.
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    phases = sorted({e.phase for e in examples})
    at = {p: k for k, p in enumerate(phases)}
    n_max = max(1, len(examples))
    fits = {p: _FirstFit(seq_len, n_max) for p in phases}   # per phase: room of its rows
    bins: dict = {p: [] for p in phases}                     # per phase: [(ids, labels, dropped, id)]
    reach = len(phases) if window is None else window
    for i in sorted(range(len(examples)), key=lambda i: (-min(len(examples[i]), seq_len), i)):
        ids, labels, dropped = _clip(examples[i], seq_len)
        if not ids:
            continue
        home = at[examples[i].phase]
        near = [phases[k] for d in range(reach + 1) for k in dict.fromkeys((home - d, home + d))
                if 0 <= k < len(phases)]
        open_row = ((q, b) for q in near for b in [fits[q].find(len(ids))] if b < len(bins[q]))
        q, b = next(open_row, (phases[home], len(bins[phases[home]])))
        fits[q].place(len(ids), b)
        if b == len(bins[q]):
            bins[q].append([])
        bins[q][b].append((ids, labels, dropped, examples[i].record_id))
    return [_make_row(b, seq_len, p, pad_id) for p in phases for b in bins[p]]


def _make_row(items: list[tuple], seq_len: int, phase: int, pad_id: int) -> Row:
    row = Row([], [], [], [], phase)
    for seg, (ids, labels, dropped, rid) in enumerate(items, start=1):
        row.input_ids += ids
        row.labels += labels
        row.position_ids += range(len(ids))
        row.segment_ids += [seg] * len(ids)
        row.record_ids.append(rid)
        row.truncated_records += dropped > 0
        row.truncated_tokens += dropped
    n_pad = seq_len - len(row.input_ids)
    row.input_ids += [pad_id] * n_pad
    row.labels += [IGNORE] * n_pad
    # Padding positions count up from 0 like one more record: position-id based packing
    # detection (flash-attn varlen, HF's find_packed_sequence_indices) then sees it as separate.
    row.position_ids += range(n_pad)
    row.segment_ids += [0] * n_pad
    return row


def packing_stats(rows: Sequence[Row]) -> dict:
    """Token accounting for telemetry; padded_tokens counts pad slots (rows * seq_len - real)."""
    total = sum(len(r.input_ids) for r in rows)
    real = sum(r.real_tokens for r in rows)
    return {
        "rows": len(rows),
        "records": sum(len(r.record_ids) for r in rows),
        "real_tokens": real,
        "padded_tokens": total - real,
        "padding_waste_pct": 100.0 * (total - real) / total if total else 0.0,
        "label_tokens": sum(1 for r in rows for t in r.labels if t != IGNORE),
        "truncated_records": sum(r.truncated_records for r in rows),
        "truncated_tokens": sum(r.truncated_tokens for r in rows),
    }


def block_causal_mask(segment_ids: torch.Tensor, mask_dtype: torch.dtype | None = None) -> torch.Tensor:
    """(B, S) segment ids → (B, 1, S, S) mask: query q may see key k iff same segment and k <= q.

    Padding (segment 0) sees only itself, so no softmax row is all-masked (SDPA would give NaN).
    mask_dtype None → bool (True = attend, for SDPA); a float dtype → additive 0 / finfo.min (eager).
    """
    B, S = segment_ids.shape
    same = segment_ids[:, :, None] == segment_ids[:, None, :]                    # (B, S, S)
    causal = torch.ones(S, S, dtype=torch.bool, device=segment_ids.device).tril()  # (S, S)
    allowed = same & causal & (segment_ids != 0)[:, :, None]                     # (B, S, S)
    allowed |= torch.eye(S, dtype=torch.bool, device=segment_ids.device)          # pad → itself
    allowed = allowed[:, None]                                                   # (B, 1, S, S)
    if mask_dtype is None or mask_dtype == torch.bool:
        return allowed
    if not mask_dtype.is_floating_point:
        raise ValueError(f"mask_dtype must be bool or a float dtype, got {mask_dtype}")
    return torch.zeros(allowed.shape, dtype=mask_dtype, device=allowed.device).masked_fill(
        ~allowed, torch.finfo(mask_dtype).min)


def collate(rows: Sequence[Row], mask_dtype: torch.dtype | None = None,
            mask: bool = True) -> dict[str, torch.Tensor]:
    """Rows → {input_ids, labels, position_ids: (B, S) long; attention_mask: (B, 1, S, S)}.

    Pass the dict straight to Qwen3ForCausalLM(**batch). attention_mask is bool for SDPA
    (default); give the model's float dtype for eager (see `mask_dtype_for`).
    mask=False leaves attention_mask out (no B·S² tensor): for a model switched to per-record
    attention (mens.train.attention.use_packed_attention), which finds the records from the
    position_ids resets. Any other attention given such a batch attends across records.
    """
    if not rows:
        raise ValueError("collate needs at least one row")
    batch = {
        "input_ids": torch.tensor([r.input_ids for r in rows], dtype=torch.long),  # (B, S)
        "labels": torch.tensor([r.labels for r in rows], dtype=torch.long),        # (B, S)
        "position_ids": torch.tensor([r.position_ids for r in rows], dtype=torch.long),
    }
    if mask:
        seg = torch.tensor([r.segment_ids for r in rows], dtype=torch.long)       # (B, S)
        batch["attention_mask"] = block_causal_mask(seg, mask_dtype)              # (B, 1, S, S)
    return batch


def mask_dtype_for(model_or_config) -> torch.dtype | None:
    """The `collate` mask dtype a model's attention implementation needs (None = bool).

    SDPA (and mens_packed, which passes masked calls to SDPA): bool. Eager: the model's float
    dtype (the mask is added to its scores; float32 when unknown, which type promotion makes
    safe for bf16 scores too). Others refuse: flash-attention ignores a 4-D mask (it packs by
    position_ids), flex wants a BlockMask.
    """
    config = getattr(model_or_config, "config", model_or_config)
    impl = getattr(config, "_attn_implementation", None) or "eager"
    if impl in ("sdpa", "mens_packed"):   # mens_packed hands any 4-D mask to sdpa unchanged
        return None
    if impl == "eager":
        dtype = getattr(model_or_config, "dtype", None)  # a model's, or transformers 5 config.dtype
        return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32
    raise ValueError(f"packed 4-D masks are wired for sdpa and eager, not {impl!r}")


def pad_batch(examples: Sequence[Example], seq_len: int, pad_id: int = 0,
              stats: dict | None = None) -> dict[str, torch.Tensor]:
    """One record per row, right-padded to seq_len (eval, and training with packing off).

    Same label rules as packing (-100 on the record's first token and on padding). Returns
    input_ids, labels, position_ids, attention_mask: all (B, S) long; the 2-D mask (1 = real)
    lets transformers build its own causal + padding mask. Truncation is counted in `stats`.
    """
    if not examples:
        raise ValueError("pad_batch needs at least one example")
    ids_rows, label_rows, mask_rows = [], [], []
    for ex in examples:
        ids, labels, dropped = _clip(ex, seq_len)
        _count(stats, dropped)
        n_pad = seq_len - len(ids)
        ids_rows.append(ids + [pad_id] * n_pad)
        label_rows.append(labels + [IGNORE] * n_pad)
        mask_rows.append([1] * len(ids) + [0] * n_pad)
    B = len(examples)
    return {
        "input_ids": torch.tensor(ids_rows, dtype=torch.long),                     # (B, S)
        "labels": torch.tensor(label_rows, dtype=torch.long),                      # (B, S)
        "position_ids": torch.arange(seq_len).expand(B, seq_len).clone(),          # (B, S)
        "attention_mask": torch.tensor(mask_rows, dtype=torch.long),               # (B, S)
    }
