"""The rules of thumb mens is measured against (REFERENCE.md, "What others estimate").

Both ignore sequence length, batch and logits: that is the point of showing them side by side.
x = billions of parameters; GB = 10^9 bytes, as the sources write it.
"""
from __future__ import annotations

from mens.plan.memory import DTYPE_BYTES

GB = 10**9


def accelerate_adam(record: dict) -> int:
    """`accelerate estimate-memory`: training with Adam ≈ 4 × the model's size, in the dtype the
    weights are held in (fp32/bf16 as the lane's precision; int4 for a QLoRA base)."""
    kind = record["lane"]["kind"]
    per_param = 0.5 if kind == "qlora" else 4 if kind == "full" else DTYPE_BYTES[record["precision"]]
    return int(4 * record["params"] * per_param)


def llamafactory(record: dict) -> int:
    """LLaMA-Factory README "Hardware Requirement": full 18x GB, LoRA (16-bit) 2x GB, QLoRA
    (4-bit) x/2 GB. DPO trains a LoRA policy here, so it reads the LoRA row."""
    x = record["params"] / 1e9
    factor = {"full": 18.0, "qlora": 0.5}.get(record["lane"]["kind"], 2.0)
    return int(factor * x * GB)


RULES = {"accelerate (4× model, Adam)": accelerate_adam,
         "LLaMA-Factory table": llamafactory}
