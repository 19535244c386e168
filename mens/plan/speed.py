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

That is the rate of SFT's training rows. What an objective spends per record on top
(objective_cost) is its card's StepCost (mens.config.objectives): policy rows in one or more
forward + backward passes, forwards without grad in the step (KTO's KL rows, GRPO's reference),
reference forwards once before training (DPO, KTO), sampling token by token and the oracle's
call (GRPO). Each part is timed by the same terms (Passes) and says whether it stands on the
fit (measured), on a constant below (assumed, with its source), or on a measurement here.

Pure arithmetic, no torch: the planner calls it for every plan.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from mens.config.objectives import ORACLE_WORKERS, card
from mens.plan import rl
from mens.plan.memory import DTYPE_BYTES, Arch, LaneModel, Shape, nf4_bytes_per_param

# What an objective's step spends beyond its training rows (objective_cost), each said in the
# plan as measured or assumed:
# a forward without grad pays this share of a training step's per-layer latency τ — a step is a
# forward, a backward of about twice its kernels, and the optimizer. ASSUMED: the evidence holds
# training steps only, so τ is fitted for the whole step and nothing measures the split.
FORWARD_LATENCY_SHARE = 1 / 3
# Decoding token by token (GRPO's sampling, HF generate in eager PyTorch) is bound by the
# kernel launches of every layer, not by FLOPs: seconds per decoder layer per token step.
DECODE_S_PER_LAYER = 1.0e-3
DECODE_SOURCE = ("from the PyTorch blog 'Accelerating Generative AI with PyTorch II: GPT, Fast' "
                 "(2023): eager Llama-7B decodes 25.5 tokens/s on an A100 at batch 1, 39 ms per "
                 "token over 32 layers, ~7 ms of it reading the weights; HF generate through "
                 "unmerged LoRA adapters launches more kernels: likely slower")
# The oracle's verdicts on one window's samples (mens.objective.rewards.oracle_rewards:
# ORACLE_WORKERS child processes): most of it is the children's start.
ORACLE_S_PER_CALL = 0.25
# A served distillation teacher (lane.distill.teacher_url): one /v1/completions scoring request
# per micro-batch. ASSUMED: 50 ms of HTTP, JSON and queueing on top of the server's forward (a
# local server's request overhead; a remote one adds its network latency)
SCORE_ROUND_TRIP_S = 0.05
ORACLE_SOURCE = (f"measured on mens's 2-core development host: one call over {ORACLE_WORKERS} "
                 "child processes took 0.02-0.25 s for 8-128 short answers of the "
                 "skill_frontmatter, python_parses, shell_syntax and rust_compiles checks; "
                 "long answers, and failing crates, take longer")
# Where mens measured an objective's steps: on CPU only (calibration/cpu.jsonl, Qwen3-0.6B's
# widths with 8 layers; recomputed from the records by tests/plan/test_objective_costs.py). Said
# beside a plan as evidence, not applied: no tier has a CPU time model, and CPU's costs (an fp32
# log-softmax over 151,936 words per row) are not a GPU's.
CPU_DPO_STEP_RATIO = (1.25, 2.89, 4.39, 7)      # min, median, max, records
CPU_DPO = ("on CPU a DPO step took {0:.2g}-{2:.2g}× (median {1:.2g}×) the time SFT's measured "
           "steps give for as many row tokens ({3} records, cpu/lora-dpo against cpu/lora in "
           "calibration/cpu.jsonl): there the row count is a floor; no GPU step of a preference "
           "objective is measured").format(*CPU_DPO_STEP_RATIO)
CPU_GRPO_DECODE_S = (1.11, 0.034)   # per sampled token step (4 rows), per 4 rows' token of SFT
CPU_GRPO = ("on CPU 96 more sampled tokens per completion added {0:.2g} s per token step to a "
            "GRPO step of 4 rows, where SFT's measured steps train 4 row tokens in {1:.2g} s "
            "(cpu/lora-grpo against cpu/lora in calibration/cpu.jsonl): sampling, not the rows, "
            "sets its time").format(*CPU_GRPO_DECODE_S)


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


def matmul_params(arch: Arch) -> int:
    """The decoder's matmul weights one token multiplies by: every nn.Linear (a mixture's
    router and shared expert included) and, of the fused experts, the k of E it is routed to
    (speed follows the active parameters; memory holds them all). The lm_head is the callers'.
    Gated DeltaNet's own recurrence (per head dk·dv a token) is left out: under 1 % of its
    projections' FLOPs at Qwen3.5's sizes."""
    p = arch.params()
    routed = p["experts"] * arch.experts_per_tok // arch.experts if arch.experts else 0
    return p["linear"] + routed


def flops_per_token(arch: Arch, lane_kind: str, checkpointing: bool, seq_len: int) -> float:
    n = matmul_params(arch) + arch.vocab * arch.hidden    # matmul params (lm_head included)
    per = n * (4 + (2 if lane_kind == "full" else 0) + (2 if checkpointing else 0))
    return per + 6 * arch.attn_layers * seq_len * arch.heads * arch.head_dim


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


def basis(lane_kind: str, model: Mapping, assumed_from: str = "the contract's speed.assumed_mfu"
          ) -> tuple[float, float, str, dict | None]:
    """(η, τ, how, the fitted class or None) of a lane's kernels: fitted on measured tokens/s,
    or the assumed MFU (and no τ)."""
    cls = kernel_class(lane_kind)
    fitted = (model.get("classes") or {}).get(cls)
    if fitted:
        eta = float(fitted["efficiency"])
        srcs = ", ".join(fitted.get("sources") or [])
        med, mx = fitted.get("heldout_median_pct"), fitted.get("heldout_max_pct")
        held = (f"held-out error (leave-one-source-out) median {med:.0f} %, max {mx:.0f} %"
                if mx is not None else "one source: no held-out error")
        how = (f"{cls} kernels at {eta:.0%} of the tier's dense bf16 TFLOPS, fitted on "
               f"{fitted['records']} measurement(s) from {srcs}; {held}")
        return eta, float(model.get("latency_s_per_layer") or 0.0), how, fitted
    eta = float(model["assumed_mfu"])
    return eta, 0.0, (f"ASSUMED {eta:.0%} MFU ({assumed_from}): no measured throughput of "
                      f"{cls} kernels"), None


def estimate(arch: Arch, lane: LaneModel, shape: Shape, tflops: float | None,
             bandwidth_gbs: float | None, world: int, model: Mapping,
             rows: int | None = None, comm_s: float = 0.0) -> Speed | None:
    """tokens/s through training rows over `world` devices of a tier (None without its
    TFLOPS), at `rows` rows of seq_len per micro-batch (default: micro_batch, SFT's), each
    device's micro-step taking `comm_s` more for the gradient communication (mens.plan.comm).
    `model`: the contract's `speed:` section."""
    if not tflops:
        return None
    eta, tau, how, fitted = basis(lane.kind, model)
    if not bandwidth_gbs:
        how += "; the tier states no bandwidth (hw.bandwidth_gbs): compute time only"
    rows = rows or shape.micro_batch
    step = Passes(arch, lane, shape.checkpointing, tflops, bandwidth_gbs, eta, tau,
                  bandwidth_gbs).train(rows, shape.seq_len) + comm_s
    if comm_s:
        how += "; plus the gradient communication, not overlapped (mens.plan.comm)"
    return Speed(world * rows * shape.seq_len / step, how, bool(fitted), eta,
                 fitted.get("heldout_max_pct") if fitted else None)


@dataclass(frozen=True)
class Passes:
    """Seconds one device spends on a pass over `rows` rows of `length` tokens: FLOPs at η of
    the tier's TFLOPS, the weights (and for decoding the KV cache) read at its bandwidth, and a
    per-layer latency. `head`: positions the lm_head scores (default every one; GRPO's
    completion_logps keeps T + 1, generate's prefill 1)."""
    arch: Arch
    lane: LaneModel
    checkpointing: bool
    tflops: float
    bandwidth_gbs: float | None          # training passes (None: compute time only)
    eta: float
    tau: float
    decode_bandwidth_gbs: float | None   # decoding is bandwidth-bound whatever the MFU said

    def _flops(self, rows: int, length: int, head: int | None, mult: int, attn: int) -> float:
        a = self.arch
        body = matmul_params(a) * mult + attn * a.attn_layers * length * a.heads * a.head_dim
        return rows * (length * body + (length if head is None else head) * a.vocab * a.hidden
                       * mult)

    def _seconds(self, flops: float, moved: float, bw: float | None, latency: float) -> float:
        return (flops / (self.tflops * 1e12 * self.eta) + (moved / (bw * 1e9) if bw else 0.0)
                + latency)

    def train(self, rows: int, length: int, head: int | None = None) -> float:
        """Forward + backward (+ the recompute under checkpointing): flops_per_token's terms."""
        mult = 4 + (2 if self.lane.kind == "full" else 0) + (2 if self.checkpointing else 0)
        return self._seconds(self._flops(rows, length, head, mult, 6),
                             bytes_per_step(self.arch, self.lane, self.checkpointing),
                             self.bandwidth_gbs, self.arch.layers * self.tau)

    def weight_bytes(self) -> float:
        """Bytes one pass reads of the weights (QLoRA: with its dequantized copies)."""
        return bytes_per_step(self.arch, self.lane, False) / 2

    def forward(self, rows: int, length: int, head: int | None = None) -> float:
        """A forward without grad (a reference, a KL row, generate's prefill): 2 FLOPs per
        parameter per token, the weights read once, FORWARD_LATENCY_SHARE of τ (ASSUMED)."""
        return self._seconds(self._flops(rows, length, head, 2, 2), self.weight_bytes(),
                             self.bandwidth_gbs,
                             self.arch.layers * self.tau * FORWARD_LATENCY_SHARE)

    def decode(self, rows: int, prompt: int, new: int) -> float:
        """`new` token steps of `rows` rows after a prompt of `prompt` tokens (the prefill not
        included): each step reads every weight and the KV cache so far, and pays
        DECODE_S_PER_LAYER per layer (ASSUMED, DECODE_SOURCE)."""
        a = self.arch
        ctx = new * prompt + new * (new - 1) / 2          # Σ context over the steps
        flops = rows * (new * 2 * (matmul_params(a) + a.vocab * a.hidden)
                        + 2 * a.attn_layers * a.heads * a.head_dim * ctx)
        kv = 2 * a.attn_layers * rows * a.kv_heads * a.head_dim * \
            DTYPE_BYTES[self.lane.precision]
        return self._seconds(flops, new * self.weight_bytes() + kv * ctx,
                             self.decode_bandwidth_gbs, new * a.layers * DECODE_S_PER_LAYER)


@dataclass(frozen=True)
class Cost:
    """What an objective's training costs in time (objective_cost): per record token over
    every device at the planned shape, each part's seconds per micro-step and what it stands on.
    A part scales with the records' tokens ("token": the rows' passes) or with the records
    ("record": sampling token by token and the oracle's call cost the same whatever a prompt's
    length)."""
    objective: str
    per_record: str                # the card's words: "2 policy rows + 2 reference forwards …"
    where: str                     # the code that runs them
    row_tokens_per_s: float        # through the policy's training rows (the speed model's)
    record_tokens_per_s: float     # records × seq_len per second, reference once (one epoch)
    sft_record_tokens_per_s: float  # SFT's at the same shape, for comparison
    micro_step_s: float            # one device's micro-step, the one-off reference left out
    tokens_per_micro_step: int     # record tokens all devices take in one micro-step (b·S·world)
    records_per_micro_step: int    # records all devices take in one micro-step (b·world)
    parts: dict                    # name → {"s": per micro-step, "share", "per", "basis"}
    measured: tuple[str, ...]
    assumed: tuple[str, ...]

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("row_tokens_per_s", "record_tokens_per_s", "sft_record_tokens_per_s",
                  "micro_step_s"):
            d[k] = round(d[k], 6 if k == "micro_step_s" else 1)
        d["measured"], d["assumed"] = list(self.measured), list(self.assumed)
        return d

    def part_seconds(self, tokens: float, distinct: float | None = None,
                     records: float | None = None) -> dict[str, float]:
        """Seconds of each part to train on `tokens` record tokens (`records` records; default
        tokens / seq_len), of which `distinct` (default all) are distinct records' tokens — the
        reference scores each record once."""
        records = tokens / (self.tokens_per_micro_step / self.records_per_micro_step) \
            if records is None else records
        out = {}
        for k, v in self.parts.items():
            n = distinct if k == "reference" and distinct is not None else tokens
            n = records if v["per"] == "record" else n
            unit = self.records_per_micro_step if v["per"] == "record" else \
                self.tokens_per_micro_step
            out[k] = n / unit * v["s"]
        return out

    def seconds(self, tokens: float, distinct: float | None = None,
                records: float | None = None) -> float:
        return sum(self.part_seconds(tokens, distinct, records).values())


def objective_cost(arch: Arch, lane: LaneModel, shape: Shape, tflops: float | None,
                   bandwidth_gbs: float | None, world: int, model: Mapping, *,
                   roofline: bool = True,
                   assumed_from: str = "the contract's speed.assumed_mfu",
                   comm_s: float = 0.0, accum: int = 1) -> Cost | None:
    """The time one micro-batch of `shape.micro_batch` records takes under the lane's
    objective (its card's StepCost: rows, passes, reference, sampling, oracle), from the speed
    model's η and τ, and `comm_s` of gradient communication per device and micro-step
    (mens.plan.comm: its own part, not overlapped). roofline=False: training passes at FLOPs
    alone (cloud.mfu). Sampling and the oracle run once per optimizer step for its window of
    `accum` micro-batches (mens.objective.grpo.Grpo.open_window), the window's rows in
    generate calls of shape.generation_rows (mens.plan.rl.calls): a micro-step's share is
    1/accum of the window's."""
    if not tflops:
        return None
    eta, tau, how, fitted = basis(lane.kind, model, assumed_from)
    c = card(lane.objective).step_cost(lane.rows_per_record, lane.reference)
    px = Passes(arch, lane, shape.checkpointing, tflops, bandwidth_gbs if roofline else None,
                eta, tau, bandwidth_gbs)
    b, S, T = shape.micro_batch, shape.seq_len, int(lane.generation_tokens or 0)
    head = T + 1 if c.samples else None           # completion_logps scores T + 1 positions
    rate = "measured" if fitted else "ASSUMED MFU"
    latency = f"rate {rate}, latency share assumed"
    parts = {"policy": (sum(px.train(k * b, S, head) for k in c.grad), "token", f"rate {rate}")}
    if c.forward and lane.teacher_served:
        # the server's forward over the rows (its model and hardware are not known here:
        # timed at the student's size on this tier) and the round trip of the request
        parts["teacher_scoring"] = (px.forward(c.forward * b, S, head) + SCORE_ROUND_TRIP_S,
                                    "token", "assumed")
    elif c.forward:   # distill: the no-grad rows are the teacher's, at the teacher's size
        t = lane.teacher if lane.teacher is None or isinstance(lane.teacher, Arch) else \
            Arch(**lane.teacher)
        fx = px if t is None else Passes(t, lane, shape.checkpointing, tflops,
                                         bandwidth_gbs if roofline else None, eta, tau,
                                         bandwidth_gbs)
        parts["step_forward"] = (fx.forward(c.forward * b, S, head), "token", latency)
    G, window = c.samples, b * accum               # the window's prompts (one device)
    calls = rl.calls(window, shape.generation_rows or G * b, G) if G else []
    if c.samples:
        P = max(S - T, 1)                          # rows planned at seq_len: prompt ≤ S − T
        one = {k: px.forward(k * G, P, 1) + px.decode(k * G, P, T) for k in set(calls)}
        parts["generation"] = (sum(one[k] for k in calls) / accum, "record", "assumed")
    oracle = c.oracle and lane.oracle_mib > 0      # no oracle processes: the teacher judges
    if oracle:   # one call judges the window's answers
        parts["oracle"] = (ORACLE_S_PER_CALL / accum, "record", "measured on a dev host")
    if comm_s:   # DDP's all-reduce / FSDP2's gathers and reduce-scatters (mens.plan.comm)
        parts["communication"] = (comm_s, "token", "link figures cited, no overlap assumed")
    if c.reference:
        parts["reference"] = (px.forward(c.reference * b, S), "token",
                              f"{latency}; once per record")
    step = sum(s for k, (s, _, _) in parts.items() if k != "reference")
    total = sum(s for s, _, _ in parts.values())
    tokens = world * b * S                         # record tokens per micro-step, all devices
    out = {k: {"s": round(s, 6), "share": round(s / total, 4), "per": per, "basis": why}
           for k, (s, per, why) in parts.items()}
    measured = [f"training rows: {how}"] if fitted else []
    assumed = [] if fitted else [f"training rows: {how}"]
    if card(lane.objective).record in ("pairs", "labeled"):
        measured.append(CPU_DPO)
    if c.samples:
        measured.append(CPU_GRPO)
    if c.forward or c.reference or c.samples:
        assumed.append(f"a forward without grad: 2 FLOPs per parameter per token at the same "
                       f"rate and {FORWARD_LATENCY_SHARE:.0%} of a training step's per-layer "
                       f"latency τ (the evidence times whole training steps only)")
    if lane.teacher_served:
        assumed.append(f"served teacher (lane.distill.teacher_url): its scoring timed as a "
                       f"forward at the student's size on this tier plus an assumed "
                       f"{SCORE_ROUND_TRIP_S * 1e3:g} ms round trip per micro-batch (the "
                       f"server's model and hardware are unknown here)")
    if not card(lane.objective).packs:
        assumed.append("a record is one row (not packed), padded to its batch's longest: time "
                       "counted at the records' own tokens, the padding not")
    if c.samples:
        assumed.append(f"decoding: {DECODE_S_PER_LAYER * 1e3:g} ms per layer per token step, "
                       f"{DECODE_SOURCE}; plus the weights and the KV cache read at the tier's "
                       f"bandwidth each step")
        assumed.append(f"sampling planned at seq_len {S}: prompts of up to {S - T} tokens, every "
                       f"completion run to max_completion_length {T} (an upper bound)")
        assumed.append(f"sampled once per optimizer step: the window's {window * G} rows "
                       f"(micro_batch {b} × grad_accum {accum} × G {G}) in {len(calls)} "
                       f"generate call(s) of ≤ {max(calls, default=0) * G} rows, and the "
                       f"oracle called once for them: each micro-step carries 1/{accum}")
        if lane.generation_where == "server":
            assumed.append("lane.grpo.generation=server: decoding timed as in-process generate "
                           "(mens serve runs the same transformers generate; a vLLM server "
                           "decodes faster — unmeasured), the adapter's reload per step not "
                           "counted")
        if oracle:
            measured.append(f"oracle: {ORACLE_S_PER_CALL:g} s per call, one per window "
                            f"({ORACLE_SOURCE})")
        else:
            assumed.append("rewards from the teacher (grpo.reward=teacher): its latency is "
                           "NOT in this estimate")
    return Cost(lane.objective, c.words(T), c.where,
                world * c.grad[0] * b * S / (px.train(c.grad[0] * b, S, head) + comm_s),
                tokens / total, tokens / (px.train(b, S) + comm_s), step, tokens, world * b, out,
                tuple(measured), tuple(assumed))
