"""How held-out examples are batched: shared by the final evaluation (mens.train.evaluate) and
the validation loop during training (mens.train.module), so both give the same numbers."""
from __future__ import annotations

EVAL_MICRO = 4   # held-out records per forward pass


def eval_chunks(examples, micro: int) -> list:
    """Longest first, so each batch pads to lengths alike (unsorted: ~40 % of slots were
    padding)."""
    examples = sorted(examples, key=len, reverse=True)
    return [examples[i:i + micro] for i in range(0, len(examples), micro)]
