"""`mens recommend`: recommendation.md for one machine — every rung × lane planned on it, the GGUF
type to run each result with, the cheapest catalogue offer for what does not fit, one paragraph.

Every number comes from the planner (the plan `mens plan` makes for `+rung=R lane=L` on this hw)
and from `mens cloud estimate` (the same rows estimate.json holds); the rules of thumb this
module adds (GGUF bits per weight, the serving context) are listed as assumptions in the memo.
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mens.errors import MensError
from mens.plan.memory import GiB

MEMO, DATA = "recommendation.md", "recommendation.json"
# Bits per weight of llama.cpp's types (its quantize tool's table for a 7B Llama; approximate for
# other models), best quality first. The run's result is exported with `mens export
# export.gguf=[<type>]`.
GGUF_BPW = [("f16", 16.0), ("q8_0", 8.5), ("q6_k", 6.56), ("q5_k_m", 5.69), ("q4_k_m", 4.89)]
SERVE_CONTEXT = 4096       # tokens of KV cache assumed when sizing the served model
SERVE_OVERHEAD_GB = 1.0    # runtime, compute buffers


def case_config(cfg: DictConfig, rung: str, lane: str) -> DictConfig:
    """cfg as if composed with `+rung=<rung> lane=<lane>` (the user's other overrides kept)."""
    from mens.config import schema
    from mens.resources import option_path

    c = cfg.copy()
    c.rung = OmegaConf.merge(OmegaConf.structured(schema.RungConfig),
                             OmegaConf.load(option_path("rung", rung)))
    c.lane = OmegaConf.merge(OmegaConf.structured(schema.LaneConfig), lane_option(lane))
    return c


def lane_option(name: str):
    """A lane option file with its own defaults list applied, as Hydra composes it (dpo.yaml:
    `defaults: [lora, _self_]`: the lora lane, then dpo's keys over it)."""
    from mens.resources import option_path

    raw = OmegaConf.load(option_path("lane", name))
    order = list(raw.pop("defaults", None) or ["_self_"])
    out = OmegaConf.create({})
    for d in order:
        out = OmegaConf.merge(out, raw if d == "_self_" else lane_option(str(d)))
    return out


def gguf_choice(rung_cfg, budget_gb: float) -> dict:
    """The best-quality GGUF type whose weights + KV cache + overhead fit the budget."""
    from mens.plan.memory import Arch

    a = Arch.of(rung_cfg)
    params = a.params()["total"]
    # K and V of the full-attention layers (a linear-attention layer's state instead: Qwen3.5)
    kv = a.state_bytes(1, SERVE_CONTEXT, 2) / GiB
    sizes = {t: params * bpw / 8 / GiB for t, bpw in GGUF_BPW}
    for t, _ in GGUF_BPW:
        need = sizes[t] + kv + SERVE_OVERHEAD_GB
        if need <= budget_gb:
            return {"type": t, "weights_gb": round(sizes[t], 2), "need_gb": round(need, 2),
                    "fits": True}
    t = GGUF_BPW[-1][0]
    return {"type": t, "weights_gb": round(sizes[t], 2),
            "need_gb": round(sizes[t] + kv + SERVE_OVERHEAD_GB, 2), "fits": False}


def plan_case(cfg: DictConfig, rung: str, lane: str, tokens_cache: dict) -> dict:
    from mens.cloud.estimate import objective_line, rate, shape_of
    from mens.plan.eta import hours, training_tokens
    from mens.plan.spec import compile_run

    c = case_config(cfg, rung, lane)
    rec = {"rung": rung, "lane": lane}
    try:
        spec, plan = compile_run(c, "plan")
    except MensError as e:
        return {**rec, "fits": False, "error": e.message}
    tok = tokens_cache.setdefault(rung, training_tokens(c, spec))
    cost, how = rate(c, spec, plan)
    h = hours(cost, tok, spec, plan)
    rec.update(fits=plan.fits, peak_gb=round(plan.peak_bytes / GiB, 3),
               budget_gb=round(plan.budget_bytes / GiB, 3),
               headroom_gb=round(plan.headroom_bytes / GiB, 3), shape=shape_of(plan),
               strategy=getattr(plan, "strategy", "single"),
               world_size=getattr(plan, "world_size", 1), tokens=tok["tokens"],
               est_hours=None if h is None else round(h, 3),
               tokens_per_s=None if cost is None else round(cost.record_tokens_per_s, 1),
               speed_how=how, objective=None if cost is None else objective_line(cost),
               assumed=[] if cost is None else list(cost.assumed),
               gguf=gguf_choice(spec.rung, plan.budget_bytes / GiB), cloud=None)
    if not plan.fits:
        from mens.cloud.estimate import estimate
        rows = [r for r in estimate(c)["offers"] if r["fits"]]
        rec["cloud"] = rows[0] if rows else None
    return rec


def recommend(cfg: DictConfig) -> dict:
    tokens: dict = {}
    cases = [plan_case(cfg, r, ln, tokens) for r in cfg.recommend.rungs for ln in cfg.recommend.lanes]
    hw = cfg.hw
    return {"hw": hw.name, "memory_gb": hw.memory_gb, "spoke": cfg.spoke.name,
            "mfu": cfg.cloud.mfu, "cases": cases, "paragraph": paragraph(cfg, cases),
            "assumptions": assumptions(cfg, tokens) + [
                f"speed: {h}" for h in dict.fromkeys(c.get("speed_how") for c in cases) if h]
            + [f"objective {h}" for h in dict.fromkeys(c.get("objective") for c in cases)
               if h and not h.startswith("sft:")]
            + list(dict.fromkeys(a for c in cases for a in c.get("assumed") or []
                                 if not a.startswith("training rows")))}


def assumptions(cfg: DictConfig, tokens: dict) -> list[str]:
    out = ["local time from the plan's speed model (the contract's `speed:`, fitted on measured "
           "throughput; per case in recommendation.json `speed_how`), or an ASSUMED cloud.mfu "
           "when given, times what each lane's objective spends per record (its rows, "
           "reference, sampling and oracle: `objective` per case); shown only when the tier "
           "states its TFLOPS",
           f"GGUF sizes from bits per weight ({', '.join(f'{t} {b:g}' for t, b in GGUF_BPW)}: "
           f"llama.cpp's table for a 7B Llama, approximate for other models) plus a "
           f"{SERVE_CONTEXT}-token KV cache and {SERVE_OVERHEAD_GB:g} GiB of runtime, against "
           f"this machine's planning budget",
           "cloud offers: `mens cloud estimate` for the same rung and lane (its assumptions: "
           "MFU, the gradient communication over the cited links with no overlap, set-up "
           "hours, catalogue dates)"]
    by_how: dict[str, list[str]] = {}   # rungs sharing a tokenizer estimate share a line
    for r, t in tokens.items():
        by_how.setdefault(t["how"] + (" (an ESTIMATE)" if t["estimate"] else ""), []).append(r)
    out += [f"training tokens ({', '.join(rs)}): {how}" for how, rs in by_how.items()]
    return out


def paragraph(cfg: DictConfig, cases: list[dict]) -> str:
    fit = [c for c in cases if c.get("fits")]
    order = {r: i for i, r in enumerate(cfg.recommend.rungs)}
    quality = {"full": 3, "lora": 2, "qlora": 1}
    where = f"{cfg.hw.name}" + (f" with {cfg.hw.memory_gb:g} GiB" if cfg.hw.memory_gb else "")
    if not fit:
        text = f"Nothing in {list(cfg.recommend.rungs)} × {list(cfg.recommend.lanes)} fits {where}."
    else:
        best = max(fit, key=lambda c: (order[c["rung"]], quality.get(c["lane"], 0)))
        s = best["shape"]
        text = (f"On {where}, the largest rung that trains locally is {best['rung']} with lane "
                f"{best['lane']}: predicted peak {best['peak_gb']:.2f} GiB of a "
                f"{best['budget_gb']:.2f} GiB budget ({best['headroom_gb']:.2f} GiB headroom), "
                f"seq_len {s['seq_len']}, micro_batch {s['micro_batch']} × grad_accum "
                f"{s['grad_accum']}{', gradient checkpointing' if s['checkpointing'] else ''}; "
                f"run the result as GGUF {best['gguf']['type']} ({best['gguf']['weights_gb']:.1f} "
                f"GiB of weights).")
    rented = [c for c in cases if not c.get("fits") and c.get("cloud")]
    if rented:
        top = max(rented, key=lambda c: (order[c["rung"]], quality.get(c["lane"], 0)))
        o = top["cloud"]
        text += (f" For {top['rung']} with lane {top['lane']}, which does not fit here, the "
                 f"cheapest catalogue offer that fits is {o['id']} ({o['tier']} × {o['count']}, "
                 f"{o['per_device_peak_gb']:.2f} GiB per device): about {o['est_hours']:.2f} h "
                 f"and ${o['est_cost_usd']:,.2f} on demand (priced {o['date']}).")
    return text


def render_md(r: dict) -> str:
    lines = [f"# What to train on {r['hw']}" + (f" ({r['memory_gb']:g} GiB)" if r['memory_gb'] else ""),
             "", r["paragraph"], "", f"Spoke: {r['spoke']}. Generated by `mens recommend`; every "
             "number is a plan (`mens plan`) or a catalogue estimate (`mens cloud estimate`).", "",
             "| rung | lane | fits here | shape | peak GiB | headroom GiB | est. h here | GGUF to run | cheapest cloud offer that fits |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in r["cases"]:
        if "error" in c:
            lines.append(f"| {c['rung']} | {c['lane']} | cannot plan: {c['error']} | | | | | | |")
            continue
        s = c["shape"]
        shape = (f"seq {s['seq_len']}, micro {s['micro_batch']} × accum {s['grad_accum']}"
                 f"{', ckpt' if s['checkpointing'] else ''}")
        g = c["gguf"]
        gguf = f"{g['type']} ({g['weights_gb']:.1f} GiB)" + ("" if g["fits"] else ", does not fit")
        o = c["cloud"]
        cloud = "—" if c["fits"] else "none in the catalogue" if not o else (
            f"{o['id']}: {o['per_device_peak_gb']:.2f} GiB/dev, {o['est_hours']:.2f} h, "
            f"${o['est_cost_usd']:,.2f}" + (f" (spot ${o['spot_cost_usd']:,.2f})"
                                             if o.get("spot_cost_usd") is not None else ""))
        hours = "—" if c["est_hours"] is None else f"{c['est_hours']:.2f}"
        lines.append(f"| {c['rung']} | {c['lane']} | {'yes' if c['fits'] else 'no'} | {shape} | "
                     f"{c['peak_gb']:.2f} | {c['headroom_gb']:.2f} | {hours} | {gguf} | {cloud} |")
    lines += ["", "## Assumptions", ""] + [f"- {a}" for a in r["assumptions"]]
    return "\n".join(lines) + "\n"


def recommend_run(cfg: DictConfig, out_dir: Path) -> dict:
    from mens.run.rundir import RunDir

    r = recommend(cfg)
    run = RunDir(out_dir)
    run.write_json(DATA, r)
    path = run.write_text(MEMO, render_md(r))
    print(r["paragraph"])
    print(f"wrote {path}")
    return r
