"""The planner: one entry point, `plan()`, used by training, `mens.plan` and calibration.

It searches the shapes a request allows (explicit sizes are a search of one), predicts each
with mens/memory.py plus the contract's cell correction, and returns a Plan: *fits* with the
shape it chose, or *refuses* with the smallest shape it tried. `ways_out()` turns a refusal into
concrete alternatives, each of them planned too, so that every suggestion is known to fit.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Mapping

from mens.config.objectives import card
from mens.errors import ConfigError
from mens.plan.memory import (DTYPE_BYTES, GiB, Arch, LaneModel, Shape, cell_key, components, contract_paths,
                              load_contract, min_margin, predict, usable_cell)
from mens.plan.comm import Link, communication, scaling
from mens.plan.rl import breakdown as rl_breakdown, generation_rows as rl_generation_rows
from mens.plan.speed import estimate as estimate_speed, objective_cost


@dataclass(frozen=True)
class PlanRequest:
    arch: Arch
    lane: LaneModel
    backend: str
    budget_bytes: int
    seq_len: int
    micro_batch: int | None = None      # None: auto
    grad_accum: int | None = None
    global_batch: int | None = None
    default_global_batch: int = 16
    checkpointing: bool | None = None   # None: only when needed
    packing: bool = True
    margin: float | None = None   # added to uncalibrated cells; None: the contract's least
    contract: str | None = None
    tflops: float | None = None
    bandwidth_gbs: float | None = None
    paths: tuple = ()   # (("attention", "per_record"), …): the run's training paths; () = the contract's
    world_size: int = 1         # devices × nodes; micro_batch and the peak are per device
    strategy: str = "auto"      # auto | single | ddp | fsdp2 (auto: chosen by plan())
    nodes: int = 1              # world_size = devices per node × nodes
    link: Link | None = None    # the tier's links (hw.link): the communication's time


@dataclass(frozen=True)
class Trial:
    micro_batch: int
    checkpointing: bool
    peak_bytes: int
    fits: bool


@dataclass(frozen=True)
class Plan:
    verdict: str                  # fits | refuses
    shape: Shape                  # chosen, or the smallest tried when refusing
    grad_accum: int
    global_batch: int
    cell: str
    calibrated: bool
    uncertainty: float
    components: dict
    raw_bytes: int
    peak_bytes: int
    budget_bytes: int
    trials: tuple[Trial, ...]
    est_tokens_per_s: float | None = None   # record tokens/s under the objective (cost)
    fitted: bool = False          # the cell has fitted coefficients (calibrated or not)
    ways_out: tuple[str, ...] = field(default=())
    world_size: int = 1
    strategy: str = "single"      # single | ddp | fsdp2
    strategy_why: str = ""
    external: bool = False        # the cell stands on published measurements (see sources)
    sources: tuple[str, ...] = ()
    speed: dict | None = None     # mens.plan.speed.Speed.to_dict(): training rows' tokens/s and
    #                               what it stands on
    cost: dict | None = None      # mens.plan.speed.Cost.to_dict(): what the objective spends
    params_total: int = 0         # the model's exact parameter count
    params_trainable: int = 0     # what trains: adapters, or every parameter
    params_active: int = 0        # weights one token's forward uses (Arch.params; = total dense)
    experts: int = 0              # a mixture of experts: experts per layer, routed per token
    experts_per_tok: int = 0
    sampling: dict | None = None  # an objective that samples (grpo): its memory by phase and
    #                               term, with formulas (mens.plan.rl.breakdown)
    signal: dict | None = None    # grpo: the warm start's pass rate and the expected share of
    #                               groups with one reward (mens.plan.signal)
    communication: dict | None = None   # several devices: what ddp / fsdp2 move, over which
    #                               link, its seconds and the speed-up (mens.plan.comm)
    @property
    def fits(self) -> bool:
        return self.verdict == "fits"

    @property
    def headroom_bytes(self) -> int:
        return self.budget_bytes - self.peak_bytes

    def to_dict(self) -> dict:
        d = asdict(self)
        d["headroom_bytes"] = self.headroom_bytes
        return d


def batch_candidates(req: PlanRequest) -> tuple[int, list[tuple[int, int]]]:
    """(global batch, [(micro, accum)] largest micro first) allowed by the explicit knobs."""
    m, a, g, w = req.micro_batch, req.grad_accum, req.global_batch, req.world_size
    if m and a:
        if g and g != m * a * w:
            raise ConfigError(
                f"train.global_batch={g} disagrees with train.micro_batch={m} × "
                f"train.grad_accum={a}{f' × {w} devices' if w > 1 else ''} = {m * a * w}: set "
                f"at most two of the three.", key="train.global_batch")
        return m * a * w, [(m, a)]
    if g and g % w:
        raise ConfigError(
            f"train.global_batch={g} does not divide over {w} devices (hw.devices × hw.nodes): "
            f"use a multiple of {w}, e.g. train.global_batch={-(-g // w) * w}.",
            key="train.global_batch")
    g = g or -(-req.default_global_batch // w) * w   # the default, rounded up to whole devices
    if w > 1:   # what each device's micro × accum must make
        fixed = m or a
        if fixed and (g // w) % fixed:
            which = "micro_batch" if m else "grad_accum"
            raise ConfigError(
                f"train.global_batch={g} over {w} devices is {g // w} per device, not a multiple "
                f"of train.{which}={fixed}: use train.global_batch={fixed * w} (or a multiple), "
                f"or leave one of them `auto`.", key=f"train.{which}")
        per, cands = batch_candidates(replace(req, global_batch=g // w, world_size=1))
        return per * w, cands
    fixed = m or (g // a if a else None)
    if fixed is not None:
        if g % (m or a):
            which = "micro_batch" if m else "grad_accum"
            raise ConfigError(
                f"train.global_batch={g} is not a multiple of train.{which}={m or a}: "
                f"pick a divisor, or leave one of them `auto`.", key=f"train.{which}")
        return g, [(fixed, g // fixed)]
    return g, [(d, g // d) for d in range(g, 0, -1) if g % d == 0]


def predict_shape(req: PlanRequest, shape: Shape, contract: Mapping | None = None) -> dict:
    contract = contract or load_contract(req.contract)
    paths = dict(req.paths)
    comps = components(req.arch, req.lane, shape, req.backend, contract, paths,
                       req.world_size, req.strategy)
    key = cell_key(req.backend, req.lane, shape.checkpointing)
    if req.world_size > 1:   # e.g. cpu/full/ckpt/fp32/fsdp2
        one, key = key, f"{key}/{req.strategy}"
        cell = usable_cell(contract, key)
        if cell is None and (cell := usable_cell(contract, one)):
            cell = {**cell, "calibrated": False}   # one device's fit: coefficients, not its claim
    else:
        cell = usable_cell(contract, key)
    if cell and any(contract_paths(contract)[k] != v for k, v in paths.items()):
        cell = {**cell, "calibrated": False}   # fitted on other paths: its coefficients, not its claim
    if cell and req.arch.linear_layers:
        # no record of any cell holds a linear-attention layer (the tiny Qwen3.5 measured 3.6 %
        # and 6.6 % above the analytic count at full rows): coefficients, not the claim
        cell = {**cell, "calibrated": False}
    # a calibrated cell replaces the uncalibrated margin with its own fitted uncertainty; a
    # fitted one that failed calibration keeps its coefficients under the larger margin
    margin = req.margin if req.margin is not None else min_margin(contract)
    return {"cell": key, **predict(comps, cell, margin)}


def generation_shape(req: PlanRequest, shape: Shape, accum: int,
                     contract: Mapping) -> tuple[Shape, dict, str, str]:
    """(shape, prediction, why, blocked): the shape with the rows of one generate call of an
    objective that samples its window (Shape.generation_rows, chosen by
    mens.plan.rl.generation_rows against this request's budget); blocked: why it cannot run
    whatever its memory, else ""."""
    lane = req.lane
    if not (lane.generation_tokens and lane.objective == "grpo"):
        return shape, predict_shape(req, shape, contract), "", ""
    preds: dict[int, dict] = {}

    def peak(rows: int) -> int:
        if rows not in preds:
            preds[rows] = predict_shape(req, replace(shape, generation_rows=rows), contract)
        return preds[rows]["peak_bytes"]
    rows, why, blocked = rl_generation_rows(
        peak, req.budget_bytes, shape.micro_batch, accum, lane.rows_per_record, shape.seq_len,
        lane.generation_batch, *((lane.server_max_batch_tokens, lane.server_max_rows)
                                 if lane.generation_where == "server" else (0, 0)))
    peak(rows)
    return replace(shape, generation_rows=rows), preds[rows], why, blocked


def plan(req: PlanRequest) -> Plan:
    """The shape to train with, on one device or (world_size > 1) per device, the strategy
    chosen when it is auto: LoRA lanes replicate the frozen base (ddp); the full lane replicates
    when a replica fits each device and shards (fsdp2) when it does not."""
    if req.world_size == 1:
        return replace(_plan(replace(req, strategy="single")), strategy="single")
    if req.strategy != "auto":
        return replace(_plan(req), strategy=req.strategy,
                       strategy_why=f"hw.strategy={req.strategy} (as asked)")
    n = req.world_size
    if req.lane.kind != "full":
        return replace(_plan(replace(req, strategy="ddp")), strategy="ddp", strategy_why=(
            f"ddp: lane {req.lane.kind} trains adapters over a frozen base, replicated on "
            f"each of {n} devices"))
    ddp = _plan(replace(req, strategy="ddp"))
    if ddp.fits:
        return replace(ddp, strategy="ddp", strategy_why=(
            f"ddp: a full replica fits each of {n} devices ({_gb(ddp.peak_bytes)})"))
    fsdp = _plan(replace(req, strategy="fsdp2"))
    return replace(fsdp, strategy="fsdp2", strategy_why=(
        f"fsdp2: a full replica needs {_gb(ddp.peak_bytes)} per device; sharded over {n} "
        f"devices {_gb(fsdp.peak_bytes)}"))


def _plan(req: PlanRequest) -> Plan:
    contract = load_contract(req.contract)
    g, batches = batch_candidates(req)
    ckpts = [req.checkpointing] if req.checkpointing is not None else [False, True]
    trials: list[Trial] = []
    chosen = smallest = None
    for ckpt in ckpts:                       # checkpointing only when nothing fits without it
        for micro, accum in batches:         # largest micro-batch first
            shape, pred, why, blocked = generation_shape(
                req, Shape(req.seq_len, micro, ckpt, req.packing), accum, contract)
            ok = pred["peak_bytes"] <= req.budget_bytes and not blocked
            trials.append(Trial(micro, ckpt, pred["peak_bytes"], ok))
            if smallest is None or pred["peak_bytes"] < smallest[2]["peak_bytes"]:
                smallest = (shape, accum, pred, why, blocked)
            if ok:
                chosen = (shape, accum, pred, why, blocked)
                break
        if chosen:
            break
    shape, accum, pred, why, blocked = chosen or smallest
    counts = req.arch.params()
    p = counts["total"]
    trainable = p if req.lane.kind == "full" else req.arch.lora_params(
        req.lane.lora_r, req.lane.lora_targets, req.lane.lora_experts)
    nodes = max(req.nodes, 1)
    comm = communication(req.arch, req.lane, req.strategy, req.world_size // nodes, nodes,
                         accum, req.link or Link(), trainable,
                         contract["model"]["trainable_bytes"])
    comm_s = (comm or {}).get("s_per_micro_step") or 0.0
    cost = objective_cost(req.arch, req.lane, shape, req.tflops, req.bandwidth_gbs,
                          req.world_size, contract["speed"], comm_s=comm_s, accum=accum)
    rows = shape.micro_batch * card(req.lane.objective).step_cost(
        req.lane.rows_per_record, req.lane.reference).grad[0]
    speed = estimate_speed(req.arch, req.lane, shape, req.tflops, req.bandwidth_gbs,
                           req.world_size, contract["speed"], rows=rows, comm_s=comm_s)
    if comm and cost and comm["s_per_micro_step"] is not None:   # one device's micro-step
        comm.update(scaling(comm, cost.micro_step_s - comm_s))
    sampling = None
    if req.lane.generation_tokens and req.lane.objective == "grpo":   # each term, named
        m, paths = contract["model"], {**contract_paths(contract), **dict(req.paths)}
        scores = m["attn_scores_materialised"].get(req.backend, True) or \
            paths["attention"] == "eager"
        sampling = rl_breakdown(req.arch, req.lane, shape.micro_batch, shape.seq_len,
                                pred["components"], m["logits_fp32_copies"], scores,
                                DTYPE_BYTES[req.lane.precision], shape.generation_rows,
                                accum, why, blocked)
    return Plan(
        verdict="fits" if chosen else "refuses", shape=shape, grad_accum=accum,
        global_batch=shape.micro_batch * accum * req.world_size, cell=pred["cell"],
        calibrated=pred["calibrated"], uncertainty=pred["uncertainty"],
        components=pred["components"], raw_bytes=pred["raw_bytes"],
        peak_bytes=pred["peak_bytes"], budget_bytes=req.budget_bytes, trials=tuple(trials),
        est_tokens_per_s=cost.record_tokens_per_s if cost else None,
        fitted=pred.get("fitted", False), world_size=req.world_size,
        external=pred.get("external", False), sources=tuple(pred.get("sources") or ()),
        speed=speed.to_dict() if speed else None, cost=cost.to_dict() if cost else None,
        params_total=p, params_trainable=trainable, sampling=sampling,
        params_active=counts["active"], experts=req.arch.experts,
        experts_per_tok=req.arch.experts_per_tok, communication=comm)


def ways_out(req: PlanRequest, *, rungs: Mapping[str, Arch] = {},
             tiers: Mapping[str, int] = {}, memory_for=None,
             memory_gb: float | None = None) -> tuple[str, ...]:
    """Concrete alternatives for a refused request, each planned and known to fit, and each a
    change: never the device the request already has.

    rungs: smaller rungs by name (largest first); tiers: named tiers' budgets in bytes;
    memory_for(budget_bytes) -> the `hw.memory_gb` whose budget covers it on this tier;
    memory_gb: this device's (a device of that size or less is no way out).
    """
    out: list[str] = []

    def fits(r: PlanRequest) -> Plan | None:
        try:
            p = plan(r)
        except ConfigError:
            return None
        return p if p.fits else None

    loose = replace(req, micro_batch=None, grad_accum=None, checkpointing=None)
    # a suggestion is computed with the shape knobs on auto, so it says so when they were not
    unpin = " ".join(k for k, v in (("train.micro_batch=auto", req.micro_batch),
                                    ("train.grad_accum=auto", req.grad_accum),
                                    ("lane.gradient_checkpointing=auto", req.checkpointing))
                     if v is not None)
    also = f" {unpin}" if unpin else ""
    if req.checkpointing is False and (p := fits(replace(req, checkpointing=None))):
        out.append(f"turn on gradient checkpointing (`lane.gradient_checkpointing=auto`): "
                   f"predicted {_gb(p.peak_bytes)}")
    if req.lane.generation_batch and (p := fits(replace(req, lane=replace(
            req.lane, generation_batch=0)))):
        out.append(f"let mens size the generation batch "
                   f"(`lane.grpo.generation_batch_size=null`): "
                   f"{p.shape.generation_rows} rows per generate call, predicted "
                   f"{_gb(p.peak_bytes)}")
    if (req.micro_batch or req.grad_accum) and (p := fits(loose)):
        out.append(f"let mens size the batch (`train.micro_batch=auto train.grad_accum=auto`): "
                   f"micro_batch {p.shape.micro_batch}, predicted {_gb(p.peak_bytes)}")
    if req.lane.kind in ("lora", "full"):
        q = replace(loose, lane=replace(req.lane, kind="qlora"))
        if p := fits(q):
            out.append(f"use QLoRA (`{_method_key(req.lane, 'qlora')}{also}`): predicted "
                       f"{_gb(p.peak_bytes)}")
    if req.lane.kind == "full" and (p := fits(replace(loose, lane=replace(req.lane, kind="lora")))):
        out.append(f"use LoRA (`{_method_key(req.lane, 'lora')}{also}`): predicted "
                   f"{_gb(p.peak_bytes)}")
    s = req.seq_len // 2
    while s >= 128:
        if p := fits(replace(loose, seq_len=s)):
            out.append(f"shorten sequences (`train.seq_len={s}{also}`): "
                       f"predicted {_gb(p.peak_bytes)}")
            break
        s //= 2
    for name, arch in rungs.items():
        if p := fits(replace(loose, arch=arch)):
            out.append(f"a smaller rung (`+rung={name}{also}`): predicted {_gb(p.peak_bytes)}")
            break
    for name, budget in sorted(tiers.items(), key=lambda kv: kv[1]):
        if budget > req.budget_bytes and (p := fits(replace(loose, budget_bytes=budget))):
            out.append(f"a bigger tier (`+hw={name}{also}`, budget {_gb(budget)}): "
                       f"predicted {_gb(p.peak_bytes)}")
            break
    if req.backend == "cuda" and req.world_size == 1:   # the same tier, several devices
        for n in (2, 4, 8):
            if p := fits(replace(loose, world_size=n, strategy="auto", global_batch=None)):
                out.append(f"{n} devices of this tier (`hw.devices={n}{also}`, {p.strategy}): "
                           f"predicted {_gb(p.peak_bytes)} per device")
                break
    if memory_for:
        need = plan(replace(loose, budget_bytes=0)).peak_bytes   # the smallest shape's peak
        gb = memory_for(need)
        if memory_gb is None or gb > memory_gb:   # the same size is not a change
            out.append(f"a device with at least {gb:g} GiB "
                       f"(`hw.memory_gb={gb:g}{also}` plans for one)")
    return tuple(out)


def _gb(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def _method_key(lane, method: str) -> str:
    """The override that changes the method: `lane=qlora` for SFT (as before objectives), and
    `lane.method=qlora` for another objective (it keeps the objective)."""
    return f"lane={method}" if lane.objective == "sft" else f"lane.method={method}"
