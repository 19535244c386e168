"""The analytic model of one training step's peak memory, by component.

Pure arithmetic on architecture numbers: no torch, no weights, instant. Every figure is in
bytes; `components()` returns them by name so the planner can show how it knows. The contract
that corrects them (its constants, fitted cells and margins) is mens.plan.contract.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from mens.config.schema import LORA_TARGETS
from mens.plan import rl
from mens.source.families import family
# Arch lives in mens.plan.arch and the contract in mens.plan.contract; every caller imports
# them from here, as before (a formula changed here bumps contract.FORMULA_VERSION)
from mens.plan.arch import Arch  # noqa: F401
from mens.plan.contract import (CONTRACT_PATH, DEFAULT_PATHS, FORMULA_VERSION,  # noqa: F401
                                cell_key, contract_paths, load_contract, min_margin,
                                model_digest, predict, shipped_constant, stale_note,
                                usable_cell, with_uncertainty)
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
GiB = 2**30


@dataclass(frozen=True)
class LaneModel:
    """The parts of a lane that change memory."""
    kind: str                        # the method: lora | qlora | full
    precision: str                   # bf16 | fp16 | fp32 (resolved)
    optimizer: str = "adamw"
    lora_r: int = 16
    lora_targets: tuple = LORA_TARGETS
    lora_dropout: float = 0.0
    # LoRA on the fused expert weights too (lane.lora.experts; PEFT's target_parameters)
    lora_experts: bool = False
    double_quant: bool = True
    blocksize: int = 64
    # qlora: the weights bitsandbytes leaves in 16 bits (embeddings, lm_head, norms) cast to
    # fp32, as PEFT's prepare_model_for_kbit_training does — mens never does; a published row
    # whose framework did says so (calibration/external: config.unquantized_dtype)
    unquantized_fp32: bool = False
    frozen_adapter_copy: bool = False   # DPO from an SFT adapter keeps a frozen reference copy
    # the objective (mens.config.objectives): its rows per record multiply the micro-batch's
    # rows (a pair's chosen and rejected answer; GRPO's group), a reference it may need
    objective: str = "sft"
    rows_per_record: int = 1
    reference: bool = False
    # an objective that samples in its step (grpo): tokens generated per row (0: none), a frozen
    # copy of the whole model as its in-step reference (full, or from train.init_adapter), and
    # the host memory of its concurrent oracle processes (MiB; counted on the cpu backend)
    generation_tokens: int = 0
    reference_copy: bool = False
    oracle_mib: float = 0.0
    # where its rollouts are generated (mens.plan.rl.GENERATIONS): local (HF generate in the
    # training process) | server (an OpenAI-compatible server on this device: its own weights)
    generation_where: str = "local"
    # rows of one generate call (lane.grpo.generation_batch_size as asked; 0: the planner
    # picks, mens.plan.planner), and a server's caps on one request: its rows × (prompt +
    # answer) tokens (serve.max_batch_tokens) and its rows (mens.plan.rl.server_caps; 0: none)
    generation_batch: int = 0
    server_max_batch_tokens: int = 0
    server_max_rows: int = 0
    # distill: the teacher's architecture (its weights and its forward: distill_teacher), and
    # whether some steps score the data's whole rows (lmbda < 1 without seq_kd)
    teacher: "Arch | None" = None
    teacher_rows: bool = False
    # a served teacher (lane.distill.teacher_url): its weights and forward are the server's
    teacher_served: bool = False

    @property
    def label(self) -> str:
        """method for SFT (the cells and numbers from before objectives), method-objective else"""
        return self.kind if self.objective == "sft" else f"{self.kind}-{self.objective}"


@dataclass(frozen=True)
class Shape:
    seq_len: int
    micro_batch: int
    checkpointing: bool
    packing: bool
    # an objective that samples (grpo): the rows of one generate call — its window (micro_batch
    # × grad_accum prompts × G) split by mens.plan.rl.calls; None: one micro-batch's rows
    generation_rows: int | None = None


def nf4_bytes_per_param(double_quant: bool, blocksize: int, bits: int = 4) -> float:
    # one absmax per block: fp32, or 8-bit plus one fp32 per 256 blocks when double-quantised
    constants = (1 + 4 / 256) / blocksize if double_quant else 4 / blocksize
    return bits / 8 + constants


def precision_class(precision: str) -> str:
    return "fp32" if DTYPE_BYTES[precision] == 4 else "half"


def components(arch: Arch, lane: LaneModel, shape: Shape, backend: str,
               contract: Mapping, paths: Mapping | None = None, world: int = 1,
               strategy: str = "single") -> dict[str, int]:
    """Bytes of each component of ONE device's peak, before the cell's correction. `paths`:
    the training paths (train.attention / loss / heap, resolved); None: the contract's own.
    `world` devices under `strategy` (single | ddp | fsdp2): see sharded()."""
    m = contract["model"]
    paths = {**contract_paths(contract), **(paths or {})}
    masked = shape.packing and paths["attention"] == "block_mask"
    p = arch.params()
    wb = DTYPE_BYTES[lane.precision]           # frozen weights and activations
    # fp32 embeddings make the residual stream fp32, and a 4-bit linear hands its output back
    # in its input's dtype: every activation is fp32 (the matmuls and logits stay 16-bit)
    upcast = lane.kind == "qlora" and lane.unquantized_fp32
    ab = 4 if upcast else wb                   # the activations' dtype
    tb = m["trainable_bytes"]                  # fp32 adapters / master weights
    # micro_batch counts records; a pair puts two rows in the batch, a GRPO prompt its group
    s, b = shape.seq_len, shape.micro_batch * lane.rows_per_record
    # a mixture of experts: a token's MLP tensors span its k experts (+ the shared one)
    h, i, L = arch.hidden, arch.mlp_width, arch.layers
    q, kv = arch.heads * arch.head_dim, arch.kv_heads * arch.head_dim

    # --- weights and what trains -------------------------------------------------------------
    if lane.kind == "full":
        weights, trainable = 0, p["total"]
        largest = arch.vocab * h if arch.tied else max(arch.vocab * h, i * h)   # embed / lm_head
        # a mixture's fused expert weight holds all E experts in one tensor
        largest = max([largest, *(E * a * o for E, a, o in arch.expert_shapes().values())])
    elif lane.kind == "qlora":
        # bitsandbytes quantises nn.Linear weights only: fused experts, biases, norms, sinks
        # and the embeddings stay in the compute dtype
        dense = p["total"] - p["linear"]
        weights = int(dense * (4 if upcast else wb) + p["linear"] * nf4_bytes_per_param(
            lane.double_quant, lane.blocksize, m["nf4_bits"]))
        trainable = arch.lora_params(lane.lora_r, lane.lora_targets, lane.lora_experts)
    else:  # lora: a frozen base plus adapters
        weights = p["total"] * wb
        trainable = arch.lora_params(lane.lora_r, lane.lora_targets, lane.lora_experts)
    shapes = arch.linear_shapes()
    # the lane's targets this model has (a way out planned on another family's rung keeps the
    # lane's list: its names that rung lacks adapt nothing there, as in lora_params)
    targets = [t for t in lane.lora_targets if t in shapes]
    if lane.kind != "full":   # the largest adapter matrix: r × the widest target side
        largest = lane.lora_r * max((max(shapes[t]) for t in targets), default=0)
        if lane.lora_experts:   # an expert weight's lora_A / lora_B stack all E experts
            largest = max([largest, *(E * lane.lora_r * max(a, b)
                                      for E, a, b in arch.expert_shapes().values())])
    if lane.frozen_adapter_copy:
        weights += trainable * tb
    # grpo's in-step reference as a deepcopy of the model: full keeps fp32 masters, so does the
    # copy; over a frozen base it copies the base and the adapters
    reference_copy = (p["total"] * tb if lane.kind == "full" else weights + trainable * tb) \
        if lane.reference_copy else 0

    # --- activations: (b, s, ·) tensors autograd keeps for backward ---------------------------
    # Split by tensor size: on CPU, glibc serves allocations of mmap_threshold and up from
    # mmap and returns them when freed; smaller ones come from its heap, which keeps freed
    # chunks — their coefficient carries that retention, the large ones' stays near 1.
    big = (m["mmap_threshold_mib"].get(backend) or 0) * 2**20
    fixed_heap = paths["heap"] == "fixed" and backend == "cpu"
    fixed_mmap = m["fixed_heap_mmap_mib"] * 2**20
    if fixed_heap:
        big = fixed_mmap

    def cut(tensor_bytes: int, total: int) -> tuple[int, int]:
        """(heap-sized, mmapped) shares of `total` bytes made of tensors of `tensor_bytes`."""
        return (0, total) if big and tensor_bytes >= big else (total, 0)

    role = "full" if lane.kind == "full" else "adapter"
    pc = "fp32" if upcast else precision_class(lane.precision)
    per_dim = m["act_bytes"][pc][role]
    layer = [0, 0]                             # one layer's set: [heap-sized, mmapped]
    for dim, width in (("hidden", h), ("intermediate", i), ("q", q), ("kv", kv)):
        for j, v in enumerate(cut(b * s * width * ab, s * b * per_dim[dim] * width)):
            layer[j] += v
    if role == "adapter":                      # each target's lora_A output (r values, fp32)
        layer[0] += s * b * m["lora_act_bytes"] * lane.lora_r * len(targets)
        # act_bytes count LoRA on every linear; an input only a LoRA branch keeps is not kept
        # when no target of its group is adapted
        for group in m["lora_inputs"].values():
            if not set(group["targets"]) & set(targets):
                layer[0] -= s * b * ab * {"hidden": h, "intermediate": i}[group["dim"]]
        if lane.lora_dropout > 0:              # PEFT keeps dropout(x) per target
            layer[0] += s * b * (ab + 1) * sum(shapes[t][0] for t in targets)
    # (b, a, s, s) softmax in + out: where the backend's kernel keeps them, or a record of
    # another framework ran eager attention (mens.calibrate.evidence)
    # (b, a, s, s) scores and the mask's copies exist in full-attention layers only (Qwen3.5's
    # linear-attention layers keep a recurrent state instead, per head not per token pair)
    # a family that trains with eager attention whatever was asked (gpt-oss's sinks, Gemma 2's
    # soft-capping) materialises them too (the tiny gpt-oss measured +31 MiB at s 512 b 2,
    # +58 MiB at s 1024 b 1 over a plan without them: two copies a layer, as here)
    eager = paths["attention"] == "eager" or family(arch.family).attn == "eager"
    scores = [0, 0]
    if m["attn_scores_materialised"].get(backend, True) or eager:
        for j, v in enumerate(cut(b * arch.heads * s * s * ab, 2 * ab * arch.heads * b * s * s)):
            scores[j] += v
    # a mask per layer type where sliding and full layers mix (Gemma, gpt-oss: counted
    # whether or not the window is shorter than the row, which the plan does not know)
    kinds = 2 if family(arch.family).window_types else 1
    if masked:                                 # sdpa turns the bool mask into an additive one
        copies = kinds * m["mask_copies"].get(backend, 1)
        for j, v in enumerate(cut(b * s * s * ab, copies * ab * b * s * s)):
            scores[j] += v
    # checkpointing keeps each layer's input (its own term: it grows with the layer count,
    # the recomputed set does not) and recomputes one layer's set at a time
    checkpoints = L * s * b * m["ckpt_hidden"] * h * ab if shape.checkpointing else 0
    A = arch.attn_layers
    if shape.checkpointing:
        act = [layer[j] + (scores[j] if A else 0) for j in (0, 1)]
    else:
        act = [L * layer[j] + A * scores[j] for j in (0, 1)]
    layer = [layer[j] + (scores[j] if A == L else 0) for j in (0, 1)]
    for j, v in enumerate(cut(b * s * h * ab, s * b * h * m["outer_act_bytes"][pc][role])):
        act[j] += v

    # --- what the allocator keeps after tensors are freed (glibc's heap on CPU) --------------
    # Under train.heap=fixed with checkpointing the heap is trimmed between layers
    # (mens.train.allocator.layer_trims): what it keeps is one layer's, not L layers'.
    ret = m["retention"][backend]
    kept = 1 if fixed_heap and shape.checkpointing else L
    retention = 0
    if role == "adapter" and shape.checkpointing and not fixed_heap:   # recomputed sets,
        retention += ret["ckpt_recompute"] * L * layer[0]                # fragmented by grads
    if lane.kind == "qlora":                        # each 4-bit linear dequantized per pass
        retention += ret["dequant"] * kept * sum(
            cut(a * o * wb, a * o * wb)[0] for a, o in arch.linear_shapes().values())

    if fixed_heap:
        # Under the fixed 8 MiB threshold the CPU records grow by ~2× the saved bytes while the
        # hidden-size (b·s, h) tensors are heap-sized, mmapped or not (backward's transients
        # among them: one `activations` term), and by ~1× once those reach the threshold
        # (0.6b-l8 LoRA s=2048: +141 MiB over s=1024 for +868 MiB saved). The whole set moves
        # with the hidden-size tensors, so it is split by them, not tensor by tensor.
        mmapped_hidden = b * s * h * ab >= fixed_mmap
        act = [0, sum(act)] if mmapped_hidden else [sum(act), 0]

    comm = 0
    if world > 1 and strategy == "fsdp2":
        weights, trainable, largest, comm = sharded(arch, weights, trainable, largest, world, tb)
    elif world > 1:   # DDP: a replica per device, and buckets holding a flat copy of the grads
        comm = trainable * tb

    # grpo's log-prob head (completion_logps then the reference's, mens.plan.rl); another
    # objective that samples scores its answer's T + 1 positions through the full logits
    head = rl.logprob_bytes(arch, b, min(lane.generation_tokens, s - 1), wb,
                            m["logits_fp32_copies"], lane.reference) \
        if lane.generation_tokens and lane.objective == "grpo" else None
    comps = {
        "weights": int(weights),
        # under autocast (16-bit runs) each fp32 trainable weight also has a 16-bit copy
        # kept for backward: counted with the trainable weights themselves
        "trainable": int(trainable * (tb + (m["autocast_copy_bytes"] if wb < 4 else 0))),
        "gradients": int(trainable * tb),
        "optimizer": int(trainable * m["optimizer_bytes"][lane.optimizer]
                         + optimizer_step_bytes(m, backend, lane, trainable, largest)),
        "activations": int(act[0]),
        "large_activations": int(act[1]),
        "checkpoints": int(checkpoints),
        # grpo scores its completions with the whole head over the last T+1 positions
        # (mens.objective.sampling.completion_logps): full logits of b·(T+1) tokens, whatever
        # train.loss says, at their backward's peak (mens.plan.rl.logprob_bytes); every other
        # objective's rows go through the run's loss path
        "logits": head["logits"] if head else
        logits_bytes(arch, b * min(lane.generation_tokens + 1, s), wb, m, "full_logits")
        if lane.generation_tokens else logits_bytes(arch, b * s, wb, m, paths["loss"]),
        "packing_mask": int(kinds * b * s * s * m["packing_mask_bytes"]) if masked else 0,
        "retention": int(retention),
        "overhead": int(m["overhead_gb"][backend] * GiB),
    }
    if world > 1:
        comps["communication"] = int(comm)
    if lane.generation_tokens or lane.reference_copy or lane.oracle_mib:
        scores = m["attn_scores_materialised"].get(backend, True) or paths["attention"] == "eager"
        # generation samples one call's rows (the window's, split: mens.plan.rl.calls), the
        # training passes one micro-batch's
        comps.update(sampling(arch, lane, shape.generation_rows or b, s, wb, backend, comps,
                              reference_copy, scores, p["total"] * wb, trainable))
        if head:
            comps["reference_logits"] = int(head["reference_logits"])
    if lane.teacher is not None:
        comps["teacher"] = distill_teacher(arch, lane, b, s, wb, m)
    elif lane.teacher_served:   # only log-probs of the sampled tokens come back: (N, T) floats
        comps["teacher"] = 0
    return comps


# (N, T, V) fp32 tensors mens.objective.distill.generalized_jsd_loss keeps between 0 < β < 1:
# the student's and the teacher's log-softmax, the stacked pair, the mixture, the two KL terms
# and their weighted sum (β = 0 or 1 keeps fewer: planned at the most)
JSD_TENSORS = 7


def distill_teacher(arch: Arch, lane: LaneModel, rows: int, s: int, wb: int,
                    m: Mapping) -> int:
    """What a distillation teacher adds (mens.objective.distill): its frozen weights at the
    run's dtype (load_base as the student's base), its no-grad forward's logits (compute dtype
    + the fp32 copy), the JSD's own fp32 tensors over the scored positions, and one of its
    layers' transients. An on-policy step scores the answer (max_completion_length + 1
    positions); a step on the data's rows (lmbda < 1, no seq_kd) scores the whole row, and the
    student's logits then span it too (the `logits` term counts the answer only)."""
    t = lane.teacher if isinstance(lane.teacher, Arch) else Arch(**lane.teacher)  # a record's
    scored = rows * (s if lane.teacher_rows else min(lane.generation_tokens + 1, s))
    weights = t.params()["total"] * wb
    logits = scored * t.vocab * (wb + 4)
    jsd = scored * t.vocab * 4 * JSD_TENSORS
    layer = rows * s * (2 * t.hidden + t.intermediate) * wb
    extra_student = (scored - rows * min(lane.generation_tokens + 1, s)) * arch.vocab * \
        (wb + 4 * m["logits_fp32_copies"])
    return int(weights + logits + jsd + layer + extra_student)


def sampling(arch: Arch, lane: LaneModel, rows: int, s: int, wb: int, backend: str,
             step: Mapping[str, int], reference_copy: int, scores: bool = True,
             base_bytes: int = 0, trainable: int = 0) -> dict[str, int]:
    """What an objective that samples in its step (grpo) adds (mens.plan.rl names each term).

    generation: HF generate (no grad) holds the KV cache of every row of one call — rows = the
    call's prompts × num_generations (Shape.generation_rows), each at most seq_len = prompt +
    max_completion (the prompt is cut to fit) —
    one prefill layer's transients and each decode step's sampling logits. It runs before the
    step's forward, so it adds only what exceeds the step's own transients (activations,
    checkpoints, logits, mask), which are not yet allocated while it runs. With
    generation=server it is the server's: `server` counts the server on this device (its own
    base weights and adapter, and one request's generation — the same rows, one step's logits
    and the sampled tokens' log-probs: rl.server_generation_bytes — held for the whole run).
    reference_copy: a frozen deepcopy of the model (full, or a run from an init adapter).
    oracle_procs: the oracle's child processes run beside training — host memory, counted where
    host memory is the budget (cpu)."""
    server = lane.generation_where == "server"
    gen = (rl.server_generation_bytes if server else rl.generation_bytes)(
        arch, rows, s, lane.generation_tokens, wb, scores) if lane.generation_tokens else {}
    transients = sum(step[k] for k in ("activations", "large_activations", "checkpoints",
                                       "logits", "packing_mask"))
    out = {"generation": 0 if server else int(max(0, sum(gen.values()) - transients)),
           "reference_copy": int(reference_copy),
           "oracle_procs": int(lane.oracle_mib * 2**20) if backend == "cpu" else 0}
    if server and gen:
        out["server"] = rl.server_bytes(base_bytes, trainable, gen)
    return out


def sharded(arch: Arch, weights: int, trainable: int, largest: int, world: int,
            tb: int) -> tuple[int, int, int, int]:
    """FSDP2 with `fully_shard` per decoder layer and on the root: each device keeps 1/world of
    every parameter (with its gradient and optimizer state). In use, a layer is all-gathered
    whole (fp32) and its gradient reduce-scattered from a whole-size buffer; the next layer is
    prefetched meanwhile: two layers' parameters and one layer's gradient at once. The root
    (embeddings, lm_head, final norm) is gathered for the whole step, with its gradient."""
    p = arch.params()
    per_layer = (p["total"] - p["embed"] - p["lm_head"] - arch.hidden) // arch.layers
    root = p["embed"] + p["lm_head"] + arch.hidden
    gathered = (2 * per_layer + per_layer + 2 * root) * tb
    own = -(-trainable // world)
    return weights // world, own, -(-largest // world), gathered


def logits_bytes(arch: Arch, tokens: int, wb: int, m: Mapping, loss: str) -> int:
    """full_logits: b·s·V in the compute dtype, its fp32 upcast and gradient. chunked
    (mens.train.chunked_ce): one chunk's fp32 logits (+ the compute-dtype matmul output below
    fp32; + the soft-cap's tanh for Gemma 2), and the (b·s, h) gradient of the hidden states
    made in the forward."""
    if loss != "chunked":
        return int(tokens * arch.vocab * (wb + 4 * m["logits_fp32_copies"]))
    rows = min(tokens, max(1, m["logits_chunk_mib"] * 2**20 // (arch.vocab * 4)))
    per = 4 + (wb if wb < 4 else 0) + (4 if family(arch.family).softcap_logits else 0)
    return int(rows * arch.vocab * per + tokens * arch.hidden * wb)


def optimizer_step_bytes(m: Mapping, backend: str, lane: LaneModel, trainable: int,
                         largest: int) -> int:
    """AdamW's transient beyond its state: sqrt(v) and its bias-corrected copy, made before the
    in-place update — per tensor in torch's single-tensor loop, for all tensors at once in the
    foreach loop (CUDA's default). SGD updates in place."""
    if not lane.optimizer.startswith("adamw"):
        return 0
    step = m["optimizer_step"][backend]
    return int(step["copies"] * (largest if step["of"] == "largest" else trainable)
               * m["trainable_bytes"])
