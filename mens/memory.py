"""The analytic model of one training step's peak memory, and the contract that corrects it.

Pure arithmetic on architecture numbers: no torch, no weights, instant. Every figure is in
bytes; `components()` returns them by name so the planner can show how it knows.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import yaml

CONTRACT_PATH = Path(__file__).resolve().parent.parent / "conf" / "contract.yaml"
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
GiB = 2**30


@dataclass(frozen=True)
class Arch:
    hidden: int          # h
    intermediate: int    # i
    layers: int          # L
    heads: int           # a
    kv_heads: int        # kv
    head_dim: int        # d
    vocab: int           # V
    tied: bool

    @classmethod
    def of(cls, rung) -> "Arch":
        return cls(rung.hidden_size, rung.intermediate_size, rung.num_hidden_layers,
                   rung.num_attention_heads, rung.num_key_value_heads, rung.head_dim,
                   rung.vocab_size, bool(rung.tie_word_embeddings))

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear layer in one decoder layer, by PEFT target name."""
        h, i, q, kv = self.hidden, self.intermediate, self.heads * self.head_dim, \
            self.kv_heads * self.head_dim
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    def params(self) -> dict[str, int]:
        """Exact parameter counts of Qwen3ForCausalLM (no biases; q/k RMSNorm over head_dim)."""
        linear = sum(a * b for a, b in self.linear_shapes().values())
        norms = 2 * self.hidden + 2 * self.head_dim
        embed = self.vocab * self.hidden
        lm_head = 0 if self.tied else embed
        total = embed + self.layers * (linear + norms) + self.hidden + lm_head
        return {"embed": embed, "lm_head": lm_head, "linear": self.layers * linear,
                "norms": self.layers * norms + self.hidden, "total": total}

    def lora_params(self, r: int, targets) -> int:
        shapes = self.linear_shapes()
        return self.layers * sum(r * (shapes[t][0] + shapes[t][1]) for t in targets)


@dataclass(frozen=True)
class LaneModel:
    """The parts of a lane that change memory."""
    kind: str                        # lora | qlora | full | dpo
    precision: str                   # bf16 | fp16 | fp32 (resolved)
    optimizer: str = "adamw"
    lora_r: int = 16
    lora_targets: tuple = ("q_proj", "k_proj", "v_proj", "o_proj",
                           "gate_proj", "up_proj", "down_proj")
    lora_dropout: float = 0.0
    double_quant: bool = True
    blocksize: int = 64
    frozen_adapter_copy: bool = False   # DPO from an SFT adapter keeps a frozen reference copy


@dataclass(frozen=True)
class Shape:
    seq_len: int
    micro_batch: int
    checkpointing: bool
    packing: bool


@lru_cache(maxsize=8)
def load_contract(path: str | None = None) -> Mapping:
    with open(path or CONTRACT_PATH) as f:
        return yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def cell_key(backend: str, lane: LaneModel, checkpointing: bool) -> str:
    return f"{backend}/{lane.kind}/{'ckpt' if checkpointing else 'nockpt'}/{lane.precision}"


def nf4_bytes_per_param(double_quant: bool, blocksize: int, bits: int = 4) -> float:
    # one absmax per block: fp32, or 8-bit plus one fp32 per 256 blocks when double-quantised
    constants = (1 + 4 / 256) / blocksize if double_quant else 4 / blocksize
    return bits / 8 + constants


def components(arch: Arch, lane: LaneModel, shape: Shape, backend: str,
               contract: Mapping) -> dict[str, int]:
    """Bytes of each component of the peak, before the cell's correction."""
    m = contract["model"]
    p = arch.params()
    wb = DTYPE_BYTES[lane.precision]           # frozen weights and activations
    tb = m["trainable_bytes"]                  # fp32 adapters / master weights
    s, b = shape.seq_len, shape.micro_batch
    h, i, L = arch.hidden, arch.intermediate, arch.layers
    q, kv = arch.heads * arch.head_dim, arch.kv_heads * arch.head_dim

    # --- weights and what trains -------------------------------------------------------------
    if lane.kind == "full":
        weights, trainable = 0, p["total"]
    elif lane.kind == "qlora":
        dense = p["embed"] + p["lm_head"] + p["norms"]
        weights = int(dense * wb + p["linear"] * nf4_bytes_per_param(
            lane.double_quant, lane.blocksize, m["nf4_bits"]))
        trainable = arch.lora_params(lane.lora_r, lane.lora_targets)
    else:  # lora, dpo: a frozen base plus adapters
        weights = p["total"] * wb
        trainable = arch.lora_params(lane.lora_r, lane.lora_targets)
    if lane.frozen_adapter_copy:
        weights += trainable * tb

    # --- activations: (b, s, ·) tensors autograd keeps for backward ---------------------------
    per_token = wb * (m["act_hidden"] * h + m["act_intermediate"] * i
                      + m["act_q"] * q + m["act_kv"] * kv)
    if m["norm_fp32_upcast"] and wb < 4:
        per_token += 4 * (2 * h + q + kv)
    if lane.kind != "full" and lane.lora_dropout > 0:   # PEFT keeps dropout(x) per target
        shapes = arch.linear_shapes()
        per_token += (wb + 1) * sum(shapes[t][0] for t in lane.lora_targets)
    scores = 0
    if m["attn_scores_materialised"].get(backend, True):
        scores = 2 * wb * b * arch.heads * s * s          # (b, a, s, s) softmax in + out
    layer = s * b * per_token + scores
    if shape.checkpointing:
        activations = L * s * b * m["ckpt_hidden"] * h * wb + layer
    else:
        activations = L * layer
    activations += 2 * s * b * h * wb                     # embedding output, final norm

    comps = {
        "weights": int(weights),
        "trainable": int(trainable * tb),
        "gradients": int(trainable * tb),
        "optimizer": int(trainable * m["optimizer_bytes"][lane.optimizer]),
        "activations": int(activations),
        "logits": int(b * s * arch.vocab * (wb + 4 * m["logits_fp32_copies"])),
        "packing_mask": int(b * s * s * m["packing_mask_bytes"]) if shape.packing else 0,
        "overhead": int(m["overhead_gb"][backend] * GiB),
    }
    return comps


def predict(comps: Mapping[str, int], cell: Mapping | None, margin: float) -> dict:
    """Apply a cell's fitted coefficients (or none) and the uncertainty margin."""
    coef = (cell or {}).get("coefficients", {})
    corrected = {k: int(v * coef.get(k, 1.0)) for k, v in comps.items()}
    raw = sum(corrected.values()) + int(coef.get("constant", 0.0) * GiB)
    uncertainty = float(cell["uncertainty"]) if cell else margin
    return {"components": corrected, "raw_bytes": raw, "uncertainty": uncertainty,
            "peak_bytes": int(raw * (1 + uncertainty)), "calibrated": bool(cell)}
