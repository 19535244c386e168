"""An evaluation planned like a run (issue #27): the largest batch a log-likelihood pass
(lm-eval's loglikelihood requests, held-out loss) or a generation pass (pass@k samples, the
greedy answers) fits in the memory budget, under the same contract as training.

No gradients, no optimizer: the peak is the weights (the lane's own storage: nf4 for QLoRA, the
adapter in fp32 beside a frozen base), one decoder layer's transient activations, the logits,
and for generation the KV cache of every layer. These terms are analytic — no calibration record
of an eval exists yet — so the plan adds the contract's uncalibrated margin, says so, and the
eval records what it used (`eval.json` → plan). Torch-free, like every planner module.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from mens.plan.memory import DTYPE_BYTES, GiB, Arch, LaneModel, min_margin, nf4_bytes_per_param

BATCHES = (64, 32, 16, 8, 4, 2, 1)


@dataclass(frozen=True)
class EvalPlan:
    mode: str                 # loglik | generate
    batch: int                # rows per forward (0: not even one fits)
    seq_len: int              # the longest row planned (prompt + answer)
    peak_bytes: int
    budget_bytes: int
    margin: float             # added to the analytic terms (uncalibrated)
    components: dict
    fits: bool
    asked: int | None = None  # eval.batch_size when it was not auto

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        gib = 2 ** 30
        how = "asked" if self.asked else "largest that fits"
        return (f"{self.mode}: batch {self.batch} × {self.seq_len} tokens ({how}), peak "
                f"{self.peak_bytes / gib:.2f} GiB of {self.budget_bytes / gib:.2f} GiB "
                f"(analytic, uncalibrated: +{self.margin:.0%})")


def eval_components(arch: Arch, lane: LaneModel, backend: str, contract, seq_len: int,
                    batch: int, mode: str) -> dict[str, int]:
    """Bytes of one device's peak in an eval forward of `batch` rows of `seq_len` tokens."""
    m = contract["model"]
    p = arch.params()
    wb = DTYPE_BYTES[lane.precision]
    b, s, h, i = batch, seq_len, arch.hidden, arch.mlp_width
    q, kv = arch.heads * arch.head_dim, arch.kv_heads * arch.head_dim
    if lane.kind == "qlora":   # nn.Linear weights quantised, the rest in the compute dtype
        dense = p["total"] - p["linear"]
        weights = int(dense * wb + p["linear"] * nf4_bytes_per_param(
            lane.double_quant, lane.blocksize, m["nf4_bits"]))
    else:
        weights = p["total"] * wb
    adapter = 0 if lane.kind == "full" else \
        arch.lora_params(lane.lora_r, lane.lora_targets, lane.lora_experts) * \
        m["trainable_bytes"]
    # one layer at a time (no autograd keeps anything): its input and output, q/k/v, the MLP's
    # gate/up/act (b, s, i) tensors; attention scores where the backend's kernel keeps them
    layer = b * s * (3 * h + q + 2 * kv + 3 * i) * wb
    if m["attn_scores_materialised"].get(backend, True) and arch.attn_layers:
        layer += 2 * b * arch.heads * s * s * wb
    if mode == "loglik":
        # lm-eval and mens's held-out loss take log_softmax over (b, s, V): the compute-dtype
        # logits and an fp32 copy
        logits = b * s * arch.vocab * (wb + 4)
        cache = 0
    else:
        # generation keeps K and V of every full-attention layer for every row (a linear-
        # attention layer its recurrent and conv state); each step's logits are (b, V)
        # (transformers keeps the last position only), sampled in fp32
        cache = arch.state_bytes(b, s, wb)
        logits = 2 * b * arch.vocab * 4
    return {"weights": int(weights), "adapter": int(adapter), "activations": int(layer),
            "logits": int(logits), "kv_cache": int(cache),
            "overhead": int(m["overhead_gb"][backend] * GiB)}


def plan_eval(arch: Arch, lane: LaneModel, backend: str, contract, budget_bytes: int,
              seq_len: int, mode: str, asked: int | None = None,
              margin: float | None = None) -> EvalPlan:
    """The largest batch of BATCHES whose padded peak fits, or the asked one checked."""
    margin = min_margin(contract) if margin is None else margin
    last = None
    for b in ([asked] if asked else BATCHES):
        comps = eval_components(arch, lane, backend, contract, seq_len, b, mode)
        peak = int(sum(comps.values()) * (1 + margin))
        last = EvalPlan(mode, b, seq_len, peak, budget_bytes, margin, comps,
                        peak <= budget_bytes, asked)
        if last.fits:
            return last
    if asked:
        return last
    return EvalPlan(mode, 0, seq_len, last.peak_bytes, budget_bytes, margin, last.components,
                    False, None)
