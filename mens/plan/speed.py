"""The speed model: tokens/s of a planned shape from measured throughput, not one assumed MFU.

A micro-batch step of T = b·s tokens on one device takes

    t = T · F / (η_class · P)  +  D / BW  +  L · τ

F: FLOPs per token (flops_per_token: 2N forward + 2N backward through the inputs, +2N weight
gradients when every weight trains, +2N recompute under checkpointing, + attention); P: the
tier's dense bf16 TFLOPS (hw.tflops_bf16); D: bytes each step moves whatever its size — the
16-bit weights read in every pass, and for QLoRA each 4-bit linear's dequantized copy written
and read (bytes_per_step); BW: the tier's memory bandwidth (hw.bandwidth_gbs), the roofline's
second side; L · τ: the step's fixed latency (kernel launches, the Python around them) per
decoder layer, which with the bandwidth term is what makes small micro-batches slow. η_class — the FLOP rate a kernel class
achieves (lora, qlora, full: QLoRA's dequantize-then-matmul and the full lane's optimizer run
other kernels) — is what published measurements are fitted for (`mens fit`, the contract's
`speed:`; mens.calibrate.speed), each with the sources it stands on and its leave-one-source-out
error, and τ likewise. A class with no evidence uses `speed.assumed_mfu` (and no τ), and
says so.

Pure arithmetic, no torch: the planner calls it for every plan.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from mens.plan.memory import DTYPE_BYTES, Arch, LaneModel, Shape, nf4_bytes_per_param


@dataclass(frozen=True)
class Speed:
    tokens_per_s: float          # all devices
    how: str                     # one line: what it stands on (sources, error) or the assumption
    measured: bool               # from fitted evidence (else the assumed MFU)
    efficiency: float            # η: achieved fraction of the tier's dense bf16 TFLOPS
    heldout_max_pct: float | None = None

    def to_dict(self) -> dict:
        return {"tokens_per_s": round(self.tokens_per_s, 1), "how": self.how,
                "measured": self.measured, "efficiency": round(self.efficiency, 4),
                "heldout_max_pct": self.heldout_max_pct}


def kernel_class(lane_kind: str) -> str:
    """The lane's method (LaneModel.kind): every objective trains as its method does (a pair's
    two rows are counted by the caller's tokens, not here)."""
    return {"qlora": "qlora", "full": "full"}.get(lane_kind, "lora")


def flops_per_token(arch: Arch, lane_kind: str, checkpointing: bool, seq_len: int) -> float:
    p = arch.params()
    n = p["linear"] + arch.vocab * arch.hidden        # matmul params (lm_head included)
    per = n * (4 + (2 if lane_kind == "full" else 0) + (2 if checkpointing else 0))
    return per + 6 * arch.layers * seq_len * arch.heads * arch.head_dim


def bytes_per_step(arch: Arch, lane: LaneModel, checkpointing: bool) -> float:
    """Bytes one micro-batch step moves whatever its token count: every weight read in each
    pass (forward, backward, and the recompute), and QLoRA's dequantized 16-bit copies written
    and read back in each pass."""
    p = arch.params()
    passes = 3 if checkpointing else 2
    wb = DTYPE_BYTES[lane.precision]
    if lane.kind == "qlora":
        linear = p["linear"] * (nf4_bytes_per_param(lane.double_quant, lane.blocksize) + 2 * wb)
        return passes * (linear + (p["total"] - p["linear"]) * wb)
    return passes * p["total"] * (4 if lane.kind == "full" else wb)


def step_terms(arch: Arch, lane: LaneModel, shape: Shape, tflops: float,
               bandwidth_gbs: float | None) -> tuple[float, float]:
    """(compute seconds per token at η = 1, memory seconds per token) of one device."""
    tokens = shape.seq_len * shape.micro_batch
    compute = flops_per_token(arch, lane.kind, shape.checkpointing, shape.seq_len) / (tflops * 1e12)
    memory = (bytes_per_step(arch, lane, shape.checkpointing) / (bandwidth_gbs * 1e9) / tokens
              if bandwidth_gbs else 0.0)
    return compute, memory


def estimate(arch: Arch, lane: LaneModel, shape: Shape, tflops: float | None,
             bandwidth_gbs: float | None, world: int, model: Mapping) -> Speed | None:
    """tokens/s over `world` devices of a tier (None without its TFLOPS). `model`: the
    contract's `speed:` section."""
    if not tflops:
        return None
    cls = kernel_class(lane.kind)
    fitted = (model.get("classes") or {}).get(cls)
    compute, memory = step_terms(arch, lane, shape, tflops, bandwidth_gbs)
    if fitted:
        eta = float(fitted["efficiency"])
        srcs = ", ".join(fitted.get("sources") or [])
        med, mx = fitted.get("heldout_median_pct"), fitted.get("heldout_max_pct")
        held = (f"held-out error (leave-one-source-out) median {med:.0f} %, max {mx:.0f} %"
                if mx is not None else "one source: no held-out error")
        how = (f"{cls} kernels at {eta:.0%} of the tier's dense bf16 TFLOPS, fitted on "
               f"{fitted['records']} measurement(s) from {srcs}; {held}")
    else:
        eta = float(model["assumed_mfu"])
        how = (f"ASSUMED {eta:.0%} MFU (the contract's speed.assumed_mfu): no measured "
               f"throughput of {cls} kernels")
    if not bandwidth_gbs:
        how += "; the tier states no bandwidth (hw.bandwidth_gbs): compute time only"
    tokens = shape.seq_len * shape.micro_batch
    tau = float(model.get("latency_s_per_layer") or 0.0) if fitted else 0.0
    step = tokens * (compute / eta + memory) + arch.layers * tau
    rate = world * tokens / step
    return Speed(rate, how, bool(fitted), eta,
                 fitted.get("heldout_max_pct") if fitted else None)
