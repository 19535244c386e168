"""`mens cloud estimate`: every catalogue offer planned by the same planner, timed and priced.

For each offer: its GPU's hw tier, the run planned on that tier with the offer's GPU count
(`+hw=<tier> hw.devices=<count>`, through mens.plan.spec.compile_run — the plan `mens plan`
prints for the same overrides), then

    hours = training tokens × the objective's seconds per record token (mens.plan.speed.Cost:
            its rows, reference, sampling and oracle, on the plan's speed model over the
            offer's GPUs, fitted on measured throughput; or the rows at an assumed `cloud.mfu`)
            + cloud.setup_hours
    cost  = hours × the offer's $/h (on demand; spot where the catalogue has a spot price)

Training tokens and the MFU are estimates and say so; the plan's per-device peak is the
planner's own number. Imports no torch (planning only).
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mens.cloud.catalog import Offer, catalog_path, load, select
from mens.errors import MensError
from mens.config.objectives import lane_fields
from mens.plan.eta import cost_of, hours, training_tokens, user_tokens  # noqa: F401 (their home)
from mens.plan.memory import GiB
from mens.plan.speed import Cost

ESTIMATE = "estimate.json"


def offer_config(cfg: DictConfig, tier: str, count: int, net: dict | None = None) -> DictConfig:
    """cfg as if composed with `+hw=<tier> hw.devices=<count>` (the user's other overrides kept;
    their hw.* keys, if any, belong to their own machine and are replaced, but hw.nodes: the
    offer × that many nodes, over the provider's network `net` (catalog.network))."""
    from mens.config import schema
    from mens.resources import option_path

    c = cfg.copy()
    hw = OmegaConf.merge(OmegaConf.structured(schema.HwConfig), OmegaConf.load(option_path("hw", tier)))
    if "devices" in hw:
        hw.devices = count
    hw.nodes = cfg.hw.nodes
    if net and hw.nodes > 1:   # across nodes: the provider's network, not the tier's typical one
        hw.link.inter, hw.link.inter_gbs = net["inter"], net["inter_gbs"]
    c.hw = hw
    return c


def plan_on(cfg: DictConfig, tier: str, count: int, cache: dict | None = None,
            net: dict | None = None):
    """(spec, plan) of cfg on `count` devices of `tier` (× hw.nodes over `net`; cached per
    tier × count × network)."""
    from mens.plan.spec import compile_run

    key = (tier, count, (net or {}).get("inter_gbs"))
    if cache is not None and key in cache:
        return cache[key]
    out = compile_run(offer_config(cfg, tier, count, net), "plan")
    if cache is not None:
        cache[key] = out
    return out


def rate(cfg: DictConfig, spec, plan) -> tuple[Cost | None, str]:
    """(what the run spends per record token, what its training rows' speed stands on): the
    plan's cost (mens.plan.speed: the speed model fitted on measured throughput, and the
    objective's rows, reference, sampling and oracle), or with `cloud.mfu` the same cost with
    the rows at an assumed MFU instead."""
    if not spec.hw.tflops_bf16:
        return None, f"{spec.hw.name} states no TFLOPS (hw.tflops_bf16): no time estimate"
    mfu = cfg.cloud.mfu
    if mfu:
        from mens.plan.memory import Arch
        from mens.plan.lane import lane_model
        from mens.plan.speed import objective_cost
        lane = lane_model(spec.lane, spec.lane.precision, spec.train.init_adapter,
                          spec.spoke.admission.check, spec.plan.contract)
        cost = objective_cost(Arch.of(spec.rung), lane, plan.shape, spec.hw.tflops_bf16,
                              getattr(spec.hw, "bandwidth_gbs", None),
                              getattr(plan, "world_size", 1), {"assumed_mfu": mfu},
                              roofline=False, assumed_from="cloud.mfu",
                              comm_s=(getattr(plan, "communication", None) or {}).get(
                                  "s_per_micro_step") or 0.0,   # the plan's, as without mfu
                              accum=plan.grad_accum)   # grpo samples once per window
        return cost, f"ASSUMED {mfu:.0%} MFU of the tier's dense bf16 TFLOPS (cloud.mfu)"
    return cost_of(plan), (plan.speed or {}).get("how", "")


def shape_of(plan) -> dict:
    s = plan.shape
    return {"seq_len": s.seq_len, "micro_batch": s.micro_batch, "grad_accum": plan.grad_accum,
            "global_batch": plan.global_batch, "checkpointing": s.checkpointing}


def estimate_offer(cfg: DictConfig, o: Offer, tokens: dict, cache: dict, today) -> dict:
    c = cfg.cloud
    from mens.cloud.catalog import network
    nodes = int(cfg.hw.nodes)
    net = network(o.provider, o.gpu) if nodes > 1 else None
    rec = {**o.to_dict(), "tier": o.tier, "nodes": nodes, "network": net, "reasons": []}
    try:
        spec, plan = plan_on(cfg, o.tier, o.count, cache, net)
    except MensError as e:   # e.g. QLoRA unsupported: the offer is unusable, said why
        rec.update(fits=False, per_device_peak_gb=None, est_hours=None, est_cost_usd=None,
                   tokens_per_s=None, row_tokens_per_s=None, speed_how=None, objective=None,
                   spot_cost_usd=None, strategy=None, world_size=o.count, shape=None,
                   communication=None)
        rec["reasons"].append(f"cannot plan: {e.message}")
        return rec
    world = getattr(plan, "world_size", 1)
    cost, how = rate(cfg, spec, plan)
    run_h = hours(cost, tokens, spec, plan)
    hours_ = None if run_h is None else run_h + c.setup_hours
    rec.update(
        tokens_per_s=None if cost is None else round(cost.record_tokens_per_s, 1),
        row_tokens_per_s=None if cost is None else round(cost.row_tokens_per_s, 1),
        speed_how=how, objective=None if cost is None else objective_line(cost),
        fits=plan.fits, strategy=getattr(plan, "strategy", "single"), world_size=world,
        per_device_peak_gb=round(plan.peak_bytes / GiB, 3),
        budget_gb=round(plan.budget_bytes / GiB, 3), shape=shape_of(plan),
        est_hours=None if hours_ is None else float(f"{hours_:.4g}"),   # 4 significant digits
        est_cost_usd=None if hours_ is None else round(hours_ * o.price_hour * nodes, 2),
        spot_cost_usd=None if hours_ is None or o.spot_price_hour is None
        else round(hours_ * o.spot_price_hour * nodes, 2),
        communication=comm_summary(plan))
    if not plan.fits:
        rec["reasons"].append(
            f"does not fit: {plan.peak_bytes / GiB:.1f} GiB per device predicted (smallest "
            f"shape tried) > {plan.budget_bytes / GiB:.1f} GiB budget on {o.tier}")
    if world != o.count * nodes:   # the planner did not plan every GPU of the offer
        rec["reasons"].append(f"planned for {world} of its {o.count} GPUs (this mens plans "
                              f"one device per run)")
    cm = rec["communication"]
    if cm and cm.get("share") is not None:
        rec["reasons"].append(f"communication {cm['share']:.0%} of the step: ~"
                              f"{cm['speedup_vs_one_device']:.1f}× one GPU of {cm['linear']}")
    if net:
        rec["reasons"].append(f"× {nodes} nodes over {net['inter']} ({net['source']})")
    if not spec.hw.bf16:
        rec["reasons"].append(f"no bf16 on {o.tier}: fp32 training (slower, larger)")
    if o.spot_price_hour is not None:
        rec["reasons"].append("spot: may be interrupted at any time (`resume=` continues from "
                              f"the last checkpoint, every {cfg.train.checkpoint_every} steps)")
    if o.age_days(today) > c.max_age_days:
        rec["reasons"].append(f"price row is {o.age_days(today)} days old "
                              f"(> cloud.max_age_days={c.max_age_days})")
    return rec


def rank_key(r: dict):
    cost = r["est_cost_usd"] if r["est_cost_usd"] is not None else float("inf")
    return (not r["fits"], cost, r["price_hour"])


def estimate(cfg: DictConfig, today: dt.date | None = None) -> dict:
    """Every selected offer, estimated and ranked (fits first, then cost). Raises MensError."""
    today = today or dt.date.today()
    path = catalog_path(cfg)
    offers = select(cfg, load(path))
    skipped: dict[str, int] = {}
    usable = []
    for o in offers:
        if o.tier is None:
            skipped[o.gpu] = skipped.get(o.gpu, 0) + 1
        else:
            usable.append(o)
    cache: dict = {}
    base_spec, base_plan = plan_on(cfg, usable[0].tier, 1, cache) if usable else (None, None)
    tok = training_tokens(cfg, base_spec) if base_spec else \
        {"tokens": 0, "distinct": 0, "how": "", "estimate": True}
    rows = sorted((estimate_offer(cfg, o, tok, cache, today) for o in usable), key=rank_key)
    oldest = min((o.date for o in offers), default=None)
    age = (today - dt.date.fromisoformat(oldest)).days if oldest else None
    c = cfg.cloud
    return {
        "rung": cfg.rung.name, **lane_fields(cfg.lane), "spoke": cfg.spoke.name,
        "catalogue": str(path), "catalogue_oldest_date": oldest, "catalogue_age_days": age,
        "catalogue_stale": age is not None and age > c.max_age_days,
        "tokens": tok, "mfu": c.mfu, "setup_hours": c.setup_hours,
        "speed": speed_lines(rows),
        "objective": objective_lines(cfg, base_spec, base_plan),
        "assumptions": [
            "several GPUs: the gradient communication is in the time (mens.plan.comm: DDP's "
            "all-reduce, FSDP2's all-gathers and reduce-scatters over the tier's link within a "
            "node and the provider's network across nodes, network.csv), at hw.link.efficiency "
            "of the cited figures and with no overlap with compute (an ASSUMPTION, "
            "conservative; per offer: `communication` in estimate.json)",
            f"{c.setup_hours:g} h of set-up and model download per run (cloud.setup_hours)",
            "training tokens: " + tok["how"] + (" (an ESTIMATE)" if tok["estimate"] else ""),
            "prices: the catalogue's rows, per hour for the whole offer, as dated",
        ],
        "skipped_no_tier": skipped,
        "offers": rows,
    }


def comm_summary(plan) -> dict | None:
    """An offer's communication, short: seconds per micro-step, its share and the speed-up
    (the plan's `communication`, mens.plan.comm)."""
    c = getattr(plan, "communication", None)
    if not c:
        return None
    keys = ("strategy", "world", "nodes", "bus_gbs", "bus_how", "s_per_micro_step", "share",
            "speedup_vs_one_device", "speedup_vs_one_node", "linear")
    return {k: c[k] for k in keys if k in c}


def speed_lines(rows: list[dict]) -> list[str]:
    """What the offers' tokens/s stand on, each distinct basis once."""
    seen: list[str] = []
    for r in rows:
        how = r.get("speed_how")
        if how and how not in seen:
            seen.append(how)
    return seen


def objective_line(cost: Cost) -> str:
    return (f"{cost.objective}: per record {cost.per_record} → "
            f"{cost.record_tokens_per_s / cost.sft_record_tokens_per_s:.2f}× SFT's record "
            f"tokens/s at the same shape")


def objective_lines(cfg: DictConfig, spec, plan) -> dict:
    """What the objective spends beyond SFT's rows, what of it is measured and what assumed —
    once for every offer (the parts are the same model on every tier)."""
    cost = rate(cfg, spec, plan)[0] if spec is not None else None
    if cost is None:
        return {"lines": [], "measured": [], "assumed": []}
    return {"lines": [objective_line(cost), f"rows counted from the code: {cost.where}"],
            "measured": [m for m in cost.measured if not m.startswith("training rows")],
            "assumed": [a for a in cost.assumed if not a.startswith("training rows")]}


def render(result: dict, top: int) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    buf = StringIO()
    con = Console(file=buf, width=160, force_terminal=False, color_system=None)
    offers = result["offers"]
    con.print(f"mens cloud estimate · {result['rung']} · lane {result['lane']} · spoke "
              f"{result['spoke']} · {len(offers)} offers from "
              f"{len({o['provider'] for o in offers})} providers · "
              f"~{result['tokens']['tokens']:,} training tokens")
    t = Table(show_edge=False)
    for col, just in [("#", "right"), ("offer", "left"), ("tier", "left"), ("fits", "left"),
                      ("strategy", "left"), ("GiB/dev", "right"), ("shape", "left"),
                      ("est h", "right"), ("$ on-demand", "right"), ("$ spot", "right"),
                      ("$/h", "right"), ("why not / notes", "left")]:
        t.add_column(col, justify=just)
    for i, o in enumerate(offers[:top], 1):
        s = o.get("shape") or {}
        shape = f"s{s['seq_len']} m{s['micro_batch']}×a{s['grad_accum']}" \
                f"{' ckpt' if s['checkpointing'] else ''}" if s else ""
        t.add_row(str(i), o["id"], o["tier"], "yes" if o["fits"] else "NO",
                  f"{o['strategy']}×{o['world_size']}" if o["strategy"] else "",
                  _num(o["per_device_peak_gb"], "{:.1f}"), shape, _num(o["est_hours"], "{:.2f}"),
                  _num(o["est_cost_usd"], "{:,.2f}"), _num(o["spot_cost_usd"], "{:,.2f}"),
                  f"{o['price_hour']:.2f}", "; ".join(_short(r) for r in o["reasons"]))
    con.print(t)
    if len(offers) > top:
        con.print(f"… {len(offers) - top} more in estimate.json (cloud.top={top})")
        hidden = [o for o in offers[top:] if not o["fits"]]
        if hidden:   # a refusal is never hidden by the cut-off
            con.print("do not fit: " + "; ".join(
                f"{o['id']} ({_num(o['per_device_peak_gb'], '{:.1f}')} GiB/dev > "
                f"{_num(o.get('budget_gb'), '{:.1f}')} GiB)" for o in hidden))
    if result["skipped_no_tier"]:
        con.print("skipped (no hw tier for the GPU): " + ", ".join(
            f"{g} ×{n}" for g, n in sorted(result["skipped_no_tier"].items())))
    stale = "OLDER THAN" if result["catalogue_stale"] else "within"
    con.print(f"catalogue: {result['catalogue']} · oldest row {result['catalogue_oldest_date']} "
              f"({result['catalogue_age_days']} days old: {stale} cloud.max_age_days) · sources "
              f"and dates per offer in estimate.json")
    for how in result.get("speed", []):
        con.print(f"speed: {how}")
    obj = result.get("objective") or {}
    for line in obj.get("lines", []):
        con.print(f"objective {line}")
    for line in obj.get("measured", []):
        con.print(f"measured: {line}")
    for line in obj.get("assumed", []):
        con.print(f"assumption: {line}")
    for a in result["assumptions"]:
        con.print(f"assumption: {a}")
    return buf.getvalue().rstrip()


def _num(v, fmt: str) -> str:
    return "—" if v is None else fmt.format(v)


def _short(reason: str) -> str:
    return reason.split(":")[0] if reason.startswith(("spot", "does not fit")) else reason


def estimate_run(cfg: DictConfig, out_dir: Path) -> dict:
    """`mens cloud estimate`: compute, print, write estimate.json into the run dir."""
    from mens.run.rundir import RunDir

    result = estimate(cfg)
    RunDir(out_dir).write_json(ESTIMATE, result)
    print(render(result, cfg.cloud.top))
    return result
