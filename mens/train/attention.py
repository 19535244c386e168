"""Per-record attention for packed rows: Σ lᵢ² work instead of one S² masked call.

A packed row (mens.data.pack) holds several records; the 4-D block-diagonal mask path runs one
SDPA over the whole row with a (B, 1, S, S) mask — S² scores per head although the records only
need Σ lᵢ², and the mask itself is B·S² elements. Here the records are found from position_ids
(each record restarts at 0, so a position that is not previous + 1 starts one) and each gets its
own causal attention:
  * CUDA with `flash_attn` installed and fp16/bf16: `flash_attn_varlen_func` over cu_seqlens.
    UNMEASURED: no CUDA machine here; written from flash-attn's documented signature.
  * Otherwise: one `is_causal=True` SDPA call per row × record. Measured on CPU only (MPS and
    CUDA-without-flash-attn run the same code, unmeasured). A variant that batches records of
    equal length into one call was no faster on real packed rows (records rarely share a
    length), so the plain loop stays.

Wiring, through transformers' own extension points (5.x):
  * `AttentionInterface` gets PACKED → `packed_attention_forward`; every family mens trains
    (Qwen2/3, Llama, Mistral, Gemma) looks `config._attn_implementation` up at *forward* time.
  * `AttentionMaskInterface` gets PACKED → `packed_mask`. Without that entry transformers hands a
    custom name attention_mask=None in *every* call, so padded eval batches and left-padded
    generation would lose their padding mask. `packed_mask` builds no mask when there is nothing
    to mask but causality (the packed training batch: no attention_mask, segments come from
    position_ids) and otherwise returns exactly what `sdpa` would get.
  * The switch is per model, for good (`use_packed_attention`), not a context manager: gradient
    checkpointing recomputes each layer's forward during backward, outside any `with` block,
    and a recompute through plain sdpa with no mask attends across records (torch's checkpoint
    caught the mismatch in the test as a CheckpointError; one it missed = wrong gradients).
    That is safe because any call that is not a packed causal forward — a 4-D or padding mask
    (pad_batch, collate(mask=True)), a decode step, a cache with history — is passed to
    transformers' `sdpa_attention_forward` unchanged: eval and generation keep the standard path.
Families the per-record path cannot express (sliding windows shorter than a row, logit
soft-capping, bidirectional or linear attention) are refused by `supports_packed`; the caller
keeps the 4-D mask path and says so.
"""
from __future__ import annotations

import warnings

from mens.source.families import WINDOW_EVERY_LAYER

PACKED = "mens_packed"
_last: list = [None, None, None]   # [position_ids tensor, its _version, segments]: one per forward


def register() -> str:
    """Register PACKED in transformers' attention and mask interfaces (idempotent); its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(PACKED, packed_attention_forward)
    AttentionMaskInterface.register(PACKED, packed_mask)
    return PACKED


def _text_config(config):
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def supports_packed(config, seq_len: int | None = None) -> tuple[bool, str]:
    """Whether per-record attention computes exactly what the block mask does for this model.

    config: a transformers config (a multimodal wrapper's text config is checked). seq_len: the
    packed row length; a sliding window at least that long never truncates a record (a token
    sees keys q - k < window back, and a record is at most seq_len long). Returns (ok, why):
    why names the feature and the fallback when not ok, is "" when ok."""
    c = _text_config(config)
    mt = getattr(c, "model_type", "?")
    fallback = "; packed rows keep the 4-D block mask (S² attention)"
    if getattr(c, "attn_logit_softcapping", None) is not None:
        return False, f"{mt} soft-caps attention logits, which per-record SDPA does not{fallback}"
    if getattr(c, "use_bidirectional_attention", False) or not getattr(c, "is_causal", True):
        return False, f"{mt} uses bidirectional attention{fallback}"
    if mt in ("gpt_oss",):
        return False, f"{mt} uses attention sinks{fallback}"
    rope = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
    if isinstance(rope, dict) and "mrope_section" in rope:
        return False, f"{mt} uses multimodal 3-D positions, not per-record resets{fallback}"
    kinds = set(getattr(c, "layer_types", None) or ["full_attention"])
    if kinds - {"full_attention", "sliding_attention"}:
        return False, f"{mt} has {sorted(kinds - {'full_attention', 'sliding_attention'})} layers{fallback}"
    window = getattr(c, "sliding_window", None)
    # Mistral passes config.sliding_window to every layer; Qwen2/3 and Gemma only to sliding ones
    in_use = window is not None and ("sliding_attention" in kinds or mt in WINDOW_EVERY_LAYER
                                     or getattr(c, "use_sliding_window", False))
    if in_use and (seq_len is None or window < seq_len):
        return False, (f"{mt} uses sliding-window attention ({window} tokens) shorter than the "
                       f"packed row ({seq_len or 'length not given'}){fallback}")
    return True, ""


def window_masks(config, seq_len: int) -> tuple[str, int] | None:
    """How the packed rows' 4-D block mask must carry this model's sliding window, or None.

    transformers hands a ready 4-D mask to every layer unchanged — its sliding-window mask
    functions return such a mask as they get it — so a block mask alone lets a sliding layer
    attend across its whole record (measured on the tiny gpt-oss, window 8, records of 20 and 28
    tokens: log-probs off by up to 5.6 from the record run alone; Gemma 2 and 3 alike, ~1).
    ("every", w): the window reaches every layer (Mistral, Mixtral) — the one mask is windowed;
    ("types", w): config.layer_types names sliding layers (gpt-oss, Gemma) — a mask per layer
    type, which their models take as a dict. None: no window shorter than the row."""
    c = _text_config(config)
    window = getattr(c, "sliding_window", None)
    if window is None or window >= seq_len:
        return None
    kinds = set(getattr(c, "layer_types", None) or [])
    if "sliding_attention" in kinds:
        return "types", int(window)
    if getattr(c, "model_type", None) in WINDOW_EVERY_LAYER or getattr(c, "use_sliding_window",
                                                                        False):
        return "every", int(window)
    return None


def windowed(mask, how: tuple[str, int]):
    """A (B, 1, S, S) block mask (bool, or additive float) with a query q seeing keys q - k <
    window only (transformers' sliding_window_overlay): the mask, or {layer type: mask}."""
    import torch

    S = mask.shape[-1]
    i = torch.arange(S, device=mask.device)
    band = (i[:, None] - i[None, :]) < how[1]                                     # (S, S)
    narrow = mask & band if mask.dtype == torch.bool else \
        mask.masked_fill(~band, torch.finfo(mask.dtype).min)
    return narrow if how[0] == "every" else {"full_attention": mask, "sliding_attention": narrow}


def use_packed_attention(model, seq_len: int | None = None) -> tuple[bool, str]:
    """Switch `model` (a PreTrainedModel or a PEFT wrapper of one) to PACKED, for good.

    Returns (True, "") when switched; (False, why) — model untouched — when the family cannot
    (supports_packed) or its modelling code does not dispatch through AttentionInterface. The
    caller then collates with the 4-D mask and prints `why`. Feed packed batches from
    `collate(rows, mask=False)`; everything else (pad_batch, generation) behaves as under sdpa.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model   # PEFT
    ok, why = supports_packed(base.config, seq_len)
    if not ok:
        return False, why
    if not getattr(base, "_supports_attention_backend", False):
        return False, (f"{type(base).__name__} does not dispatch attention through transformers' "
                       f"AttentionInterface; packed rows keep the 4-D block mask (S² attention)")
    register()
    base.set_attn_implementation(PACKED)
    return True, ""


def packed_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, attention_mask=None,
                **kwargs):
    """Mask entry for PACKED: None (no b·s² tensor) for a causal forward over whole rows with no
    padding mask — the attention then takes records from position_ids — else sdpa's own mask."""
    from transformers.masking_utils import sdpa_mask

    plain = q_length == kv_length and not _nonzero(q_offset) and not _nonzero(kv_offset)
    if plain and (attention_mask is None or bool(attention_mask.all())):
        return None
    return sdpa_mask(batch_size, q_length, kv_length, q_offset, kv_offset,
                     attention_mask=attention_mask, **kwargs)


def _nonzero(offset) -> bool:
    return bool(offset != 0)   # an int, or a 0-d tensor (static caches)


def segments(position_ids, batch: int, seq: int, cu_seq_lens=None) -> list[list[tuple[int, int]]]:
    """Per row, the (start, end) of each record. From position_ids (B or 1, S): a token whose
    position is not the previous one + 1 starts a record. Or from cu_seq_lens over the flattened
    B·S tokens (transformers' padding-free convention), which must not cross rows."""
    import torch

    if cu_seq_lens is not None:
        cu = [int(x) for x in cu_seq_lens.tolist()]
        out: list[list[tuple[int, int]]] = [[] for _ in range(batch)]
        for a, b in zip(cu, cu[1:]):
            row = a // seq
            if b > (row + 1) * seq or b <= a:
                raise ValueError(f"cu_seq_lens segment [{a}, {b}) crosses a row of {seq} tokens")
            out[row].append((a - row * seq, b - row * seq))
        return out
    if position_ids.dim() != 2:
        raise ValueError(f"packed attention needs (batch, seq) position_ids, got {tuple(position_ids.shape)}")
    pos = position_ids.expand(batch, seq)
    start = torch.ones(batch, seq, dtype=torch.bool, device=pos.device)
    start[:, 1:] = pos[:, 1:] != pos[:, :-1] + 1                                     # (B, S)
    rows: list[list[tuple[int, int]]] = [[] for _ in range(batch)]
    bounds: dict[int, list[int]] = {b: [] for b in range(batch)}
    for b, s in start.nonzero().tolist():   # one host sync per forward (cached across layers)
        bounds[b].append(s)
    for b in range(batch):
        cuts = bounds[b] + [seq]
        rows[b] = list(zip(cuts, cuts[1:]))
    return rows


def _segments_cached(position_ids, batch, seq):
    # Every layer of one forward (and its checkpoint recompute) passes the same position_ids
    # tensor. Holding a reference keeps its storage alive, so identity + version is a safe key.
    if _last[0] is position_ids and _last[1] == position_ids._version:
        return _last[2]
    segs = segments(position_ids, batch, seq)
    _last[:] = [position_ids, position_ids._version, segs]
    return segs


def packed_attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0,
                             scaling: float | None = None, sliding_window: int | None = None,
                             softcap: float | None = None, **kwargs):
    """transformers attention fn: q (B, H, S, D), k/v (B, Hkv, S, D) → ((B, S, H, D), None).

    Causal attention within each record of each row. Calls that are not a packed causal forward
    (a mask, a cache with history, a decode step) go to sdpa_attention_forward unchanged."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    B, H, S, D = query.shape
    if softcap is not None or kwargs.get("s_aux") is not None or kwargs.get("position_bias") is not None:
        raise RuntimeError(f"{PACKED} attention cannot apply softcap / sinks / position bias: "
                           f"check supports_packed() before use_packed_attention()")
    standard = attention_mask is not None or key.shape[2] != S or S == 1 \
        or not getattr(module, "is_causal", True)
    position_ids = kwargs.get("position_ids")
    cu = kwargs.get("cu_seq_lens_q")
    if standard or (position_ids is None and cu is None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, sliding_window=sliding_window, **kwargs)
    segs = segments(None, B, S, cu) if cu is not None else _segments_cached(position_ids, B, S)
    longest = max(e - s for row in segs for s, e in row)
    if sliding_window is not None and longest > sliding_window:
        raise RuntimeError(f"{PACKED}: a record of {longest} tokens exceeds the sliding window "
                           f"({sliding_window}); supports_packed() should have refused this model")
    if all(len(row) == 1 for row in segs):   # nothing packed: one batched causal call is the same
        return sdpa_attention_forward(module, query, key, value, None, dropout=dropout,
                                      scaling=scaling, **kwargs)
    if query.is_cuda:
        out = _flash_varlen(query, key, value, segs, longest, dropout, scaling)
        if out is not None:
            return out, None
    groups = getattr(module, "num_key_value_groups", 1)
    gqa = {"enable_gqa": True} if groups > 1 else {}   # k/v keep Hkv heads; SDPA repeats them
    rows = []
    for b, row in enumerate(segs):
        parts = [torch.nn.functional.scaled_dot_product_attention(
            query[b:b + 1, :, s:e], key[b:b + 1, :, s:e], value[b:b + 1, :, s:e],
            dropout_p=dropout, scale=scaling, is_causal=True, **gqa) for s, e in row]  # (1, H, l, D)
        rows.append(torch.cat(parts, dim=2))                                         # (1, H, S, D)
    return torch.cat(rows).transpose(1, 2).contiguous(), None                        # (B, S, H, D)


def _flash_varlen(query, key, value, segs, longest, dropout, scaling):
    """flash-attn's varlen kernel over the flattened rows; None (after a loud warning) when it
    cannot run. UNMEASURED: written for CUDA + flash-attn 2, never run on this project's machines."""
    import torch

    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:
        _warn_once("flash_attn is not installed: packed attention on CUDA runs one SDPA call per "
                   "record (pip install flash-attn for the varlen kernel)")
        return None
    if query.dtype not in (torch.float16, torch.bfloat16):
        _warn_once(f"flash_attn needs fp16/bf16, not {query.dtype}: packed attention runs one "
                   f"SDPA call per record")
        return None
    B, H, S, D = query.shape
    cuts = [b * S + s for b, row in enumerate(segs) for s, _ in row] + [B * S]
    cu = torch.tensor(cuts, dtype=torch.int32, device=query.device)
    flat = lambda t: t.transpose(1, 2).reshape(B * S, t.shape[1], D)   # (B·S, heads, D)
    out = flash_attn_varlen_func(flat(query), flat(key), flat(value), cu, cu, longest, longest,
                                 dropout_p=dropout, softmax_scale=scaling, causal=True)
    return out.view(B, S, H, D)


_warned: set[str] = set()


def _warn_once(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        warnings.warn(f"mens: {msg}", RuntimeWarning, stacklevel=3)
