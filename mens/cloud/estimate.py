"""`mens cloud estimate`: every catalogue offer planned by the same planner, timed and priced.

For each offer: its GPU's hw tier, the run planned on that tier with the offer's GPU count
(`+hw=<tier> hw.devices=<count>`, through mens.plan.spec.compile_run — the plan `mens plan`
prints for the same overrides), then

    hours = training tokens ÷ tokens/s (the plan's speed model over the offer's GPUs, fitted on
            measured throughput; or an assumed `cloud.mfu`) + cloud.setup_hours
    cost  = hours × the offer's $/h (on demand; spot where the catalogue has a spot price)

Training tokens and the MFU are estimates and say so; the plan's per-device peak is the
planner's own number. Imports no torch (planning only).
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mens.cloud.catalog import Offer, catalog_path, load, select
from mens.errors import MensError
from mens.config.objectives import lane_fields
from mens.plan.memory import GiB
from mens.resources import CORPORA

ESTIMATE = "estimate.json"


def offer_config(cfg: DictConfig, tier: str, count: int) -> DictConfig:
    """cfg as if composed with `+hw=<tier> hw.devices=<count>` (the user's other overrides kept;
    their hw.* keys, if any, belong to their own machine and are replaced)."""
    from mens.config import schema
    from mens.resources import option_path

    c = cfg.copy()
    hw = OmegaConf.merge(OmegaConf.structured(schema.HwConfig), OmegaConf.load(option_path("hw", tier)))
    if "devices" in hw:
        hw.devices = count
    c.hw = hw
    return c


def plan_on(cfg: DictConfig, tier: str, count: int, cache: dict | None = None):
    """(spec, plan) of cfg on `count` devices of `tier` (cached per tier × count)."""
    from mens.plan.spec import compile_run

    key = (tier, count)
    if cache is not None and key in cache:
        return cache[key]
    out = compile_run(offer_config(cfg, tier, count), "plan")
    if cache is not None:
        cache[key] = out
    return out


def training_tokens(cfg: DictConfig, spec) -> dict:
    """Tokens one training run processes: Σ over epochs of the records the curriculum admits ×
    tokens per record. From the spoke's manifests (no tokenizer needed); an estimate, said."""
    if cfg.cloud.tokens:
        return {"tokens": int(cfg.cloud.tokens), "how": "cloud.tokens (given)", "estimate": False}
    from mens.data.select import user_data
    if user_data(spec):
        return user_tokens(cfg, spec)
    name = spec.spoke.name
    lengths, manifest = CORPORA / name / "lengths.json", CORPORA / name / "manifest.json"
    if not (lengths.is_file() and manifest.is_file()):
        from mens.errors import ConfigError
        raise ConfigError(f"spoke {name} has no length manifest (lengths.json, manifest.json) to "
                          f"count its tokens: give `cloud.tokens=<training tokens>`.",
                          key="cloud.tokens")
    m = json.loads(lengths.read_text())
    by_diff = json.loads(manifest.read_text())["counts"]["train"]["by_difficulty"]
    caps = list(spec.curriculum.caps)
    epochs = [sum(n for d, n in by_diff.items() if int(d) <= caps[min(e, len(caps) - 1)])
              for e in range(spec.curriculum.epochs)]
    per = float(m["p50_tokens"])   # the median record: the manifest keeps no mean
    how = (f"{name}: {sum(epochs)} records over {len(epochs)} epoch(s) (curriculum caps "
           f"{caps}) × {per:g} tokens (median record, {m['tokenizer']} tokenizer)")
    if not spec.rung.tokenizer_bundled:   # rescale to this rung's tokenizer by characters
        per = per * (m["p99_chars"] / m.get("est_chars_per_token", 3.5)) / m["p99_tokens"]
        how += (f", rescaled to ~{per:.0f} for {spec.rung.name}'s tokenizer at "
                f"{m.get('est_chars_per_token', 3.5)} chars/token (assumed)")
    return {"tokens": int(sum(epochs) * per), "how": how, "estimate": True}


def user_tokens(cfg: DictConfig, spec) -> dict:
    """The user's data (data=file|hf): its training records' tokens, each cut at the run's
    seq_len (packed rows carry no padding), × the curriculum's epochs. Measured with the run's
    tokenizer where it is here (mens.data.lengths, cached), else estimated from characters."""
    from mens.data import lengths as L
    from mens.data.select import data_label, dataset

    ds = dataset(spec.data, spec.lane.objective, spec.curriculum.phases)
    enc = L.encoder(cfg)
    lens = L.lengths(ds, enc)["train"] if enc is not None else L.estimate(ds)
    seq = spec.train.seq_len
    per_epoch = sum(min(t, seq) for t, _ in lens)
    epochs = spec.curriculum.epochs
    counted = (f"measured with the {spec.rung.name} tokenizer" if enc is not None else
               "estimated at 3.5 characters per token: the tokenizer is not here")
    how = (f"your data {data_label(spec.data)}: {len(lens):,} training records, "
           f"{per_epoch:,} tokens per epoch (each cut at seq_len {seq}; {counted}) × "
           f"{epochs} epoch(s)")
    return {"tokens": per_epoch * epochs, "how": how, "estimate": enc is None}


def rate(cfg: DictConfig, spec, plan) -> tuple[float | None, str]:
    """(tokens/s over the run's devices, what it stands on): the plan's speed model (mens.plan.
    speed, fitted on measured throughput), or with `cloud.mfu` an assumed MFU instead."""
    if not spec.hw.tflops_bf16:
        return None, f"{spec.hw.name} states no TFLOPS (hw.tflops_bf16): no time estimate"
    mfu = cfg.cloud.mfu
    if mfu:
        from mens.plan.memory import Arch
        from mens.plan.speed import flops_per_token
        s = plan.shape
        fpt = flops_per_token(Arch.of(spec.rung), spec.lane.method, s.checkpointing, s.seq_len)
        world = getattr(plan, "world_size", 1)
        return (world * spec.hw.tflops_bf16 * 1e12 * mfu / fpt,
                f"ASSUMED {mfu:.0%} MFU of the tier's dense bf16 TFLOPS (cloud.mfu)")
    return plan.est_tokens_per_s, (plan.speed or {}).get("how", "")


def hours_for(tokens: int, tokens_per_s: float | None, setup: float) -> float | None:
    if not tokens_per_s:
        return None
    return tokens / tokens_per_s / 3600 + setup


def shape_of(plan) -> dict:
    s = plan.shape
    return {"seq_len": s.seq_len, "micro_batch": s.micro_batch, "grad_accum": plan.grad_accum,
            "global_batch": plan.global_batch, "checkpointing": s.checkpointing}


def estimate_offer(cfg: DictConfig, o: Offer, tokens: int, cache: dict, today) -> dict:
    c = cfg.cloud
    rec = {**o.to_dict(), "tier": o.tier, "reasons": []}
    try:
        spec, plan = plan_on(cfg, o.tier, o.count, cache)
    except MensError as e:   # e.g. QLoRA unsupported: the offer is unusable, said why
        rec.update(fits=False, per_device_peak_gb=None, est_hours=None, est_cost_usd=None,
                   tokens_per_s=None, speed_how=None,
                   spot_cost_usd=None, strategy=None, world_size=o.count, shape=None)
        rec["reasons"].append(f"cannot plan: {e.message}")
        return rec
    world = getattr(plan, "world_size", 1)
    tps, how = rate(cfg, spec, plan)
    hours = hours_for(tokens, tps, c.setup_hours)
    rec.update(tokens_per_s=None if tps is None else round(tps, 1), speed_how=how,
        fits=plan.fits, strategy=getattr(plan, "strategy", "single"), world_size=world,
        per_device_peak_gb=round(plan.peak_bytes / GiB, 3),
        budget_gb=round(plan.budget_bytes / GiB, 3), shape=shape_of(plan),
        est_hours=None if hours is None else float(f"{hours:.4g}"),   # 4 significant digits
        est_cost_usd=None if hours is None else round(hours * o.price_hour, 2),
        spot_cost_usd=None if hours is None or o.spot_price_hour is None
        else round(hours * o.spot_price_hour, 2))
    if not plan.fits:
        rec["reasons"].append(
            f"does not fit: {plan.peak_bytes / GiB:.1f} GiB per device predicted (smallest "
            f"shape tried) > {plan.budget_bytes / GiB:.1f} GiB budget on {o.tier}")
    if world != o.count:   # the planner did not plan every GPU of the offer
        rec["reasons"].append(f"planned for {world} of its {o.count} GPUs (this mens plans "
                              f"one device per run)")
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
    tok = training_tokens(cfg, base_spec) if base_spec else {"tokens": 0, "how": "", "estimate": True}
    rows = sorted((estimate_offer(cfg, o, tok["tokens"], cache, today) for o in usable),
                  key=rank_key)
    oldest = min((o.date for o in offers), default=None)
    age = (today - dt.date.fromisoformat(oldest)).days if oldest else None
    c = cfg.cloud
    return {
        "rung": cfg.rung.name, **lane_fields(cfg.lane), "spoke": cfg.spoke.name,
        "catalogue": str(path), "catalogue_oldest_date": oldest, "catalogue_age_days": age,
        "catalogue_stale": age is not None and age > c.max_age_days,
        "tokens": tok, "mfu": c.mfu, "setup_hours": c.setup_hours,
        "speed": speed_lines(rows),
        "assumptions": [
            "throughput scales linearly with the offer's GPU count (an ASSUMPTION: "
            "communication is not modelled in time)",
            f"{c.setup_hours:g} h of set-up and model download per run (cloud.setup_hours)",
            "training tokens: " + tok["how"] + (" (an ESTIMATE)" if tok["estimate"] else ""),
            "prices: the catalogue's rows, per hour for the whole offer, as dated",
        ],
        "skipped_no_tier": skipped,
        "offers": rows,
    }


def speed_lines(rows: list[dict]) -> list[str]:
    """What the offers' tokens/s stand on, each distinct basis once."""
    seen: list[str] = []
    for r in rows:
        how = r.get("speed_how")
        if how and how not in seen:
            seen.append(how)
    return seen


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
