"""What a plan leaves: the table printed, spec.yaml + plan.json written into the run dir.

`plan_run` is shared by `mens plan` (which stops there) and `mens train` (which goes on to
train when the plan fits). Imports no torch/transformers on a named tier: well under a second.
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mens.config.objectives import label as lane_label, lane_fields
from mens.errors import PlanRefused
from mens.plan.memory import GiB, load_contract
from mens.plan.planner import Plan
from mens.plan.spec import compile_run
from mens.run.rundir import RunDir

WHAT = {
    "weights": "frozen base weights",
    "trainable": "trainable params (fp32)",
    "gradients": "their gradients (fp32)",
    "optimizer": "optimizer state (+ AdamW's step transient)",
    "activations": "saved activations",
    "large_activations": "saved activations in mmapped tensors (CPU: ≥ the mmap threshold)",
    "checkpoints": "each layer's input, kept for the recompute (checkpointing)",
    "logits": "logits + fp32 loss copies",
    "packing_mask": "4-D packing mask",
    "retention": "freed memory the allocator keeps (CPU heap)",
    "overhead": "runtime overhead",
    "communication": "ddp gradient buckets / fsdp2 gathered layers + root (per device)",
    "generation": "sampling's phase (KV cache …) beyond the step's transients (grpo)",
    "reference_logits": "the reference's logits beside the policy's kept log-probs (grpo)",
    "server": "generation server on this device: its weights + KV cache (grpo)",
    "reference_copy": "frozen copy of the model: the in-step reference (grpo)",
    "oracle_procs": "oracle child processes beside training (host memory)",
    "teacher": "distill teacher: weights, forward logits, the JSD's tensors",
}


def plan_run(cfg: DictConfig, out_dir: Path, purpose: str = "plan", write: bool = True):
    """Compile, print the plan, write spec.yaml + plan.json (unless resuming: they exist).
    Refusal → PlanRefused (exit 3) unless plan.force, which goes on loudly and is recorded."""
    spec, plan = compile_run(cfg, purpose)
    forced = not plan.fits and spec.plan.force
    eta = run_eta(cfg, spec, plan)
    record = {"verdict": plan.verdict, "forced": forced, "purpose": purpose,
              "budget_gb": spec.budget_gb, "hw": spec.hw.name, "backend": spec.hw.backend,
              "rung": spec.rung.name, **lane_fields(spec.lane), "precision": spec.lane.precision,
              "notes": list(spec.notes), "detected": spec.detected, **plan.to_dict(),
              "eta": eta}
    run = RunDir(out_dir)
    run.path.mkdir(parents=True, exist_ok=True)
    if write:
        run.write_json(RunDir.PLAN, record)
        write_spec(run, spec)
    print(render(spec, plan, forced, eta))
    if not plan.fits and not forced:
        raise PlanRefused(refusal_message(spec, plan), plan=plan)
    if purpose == "train":   # the plan fits: now fetch missing weights (and record the commit)
        from mens.source.resolve import ensure_weights
        fetched = ensure_weights(spec)
        if fetched is not spec:
            spec = fetched
            if write:
                write_spec(run, spec)
    return spec, plan


def write_spec(run: RunDir, spec) -> None:
    """spec.yaml: the re-launchable config plus what was detected, noted and locked."""
    run.write_text(RunDir.SPEC, OmegaConf.to_yaml(
        {**spec.config_dict(), "detected": spec.detected, "notes": list(spec.notes),
         "versions": spec.versions, "data_lock": list(spec.data_lock)}))


def refusal_message(spec, plan: Plan) -> str:
    s = plan.shape
    ways = "; ".join(plan.ways_out) or "none found among the named tiers and rungs"
    blocked = (plan.sampling or {}).get("generation_blocked")
    if blocked:   # memory is not what stops it: the rollout server's cap is
        return (f"the plan refuses: {blocked}. Ways out: lower train.micro_batch or "
                f"lane.grpo.generation_batch_size (a multiple of lane.grpo.num_generations), "
                f"shorten train.seq_len, or use lane.grpo.generation=local; {ways}.")
    return (f"the plan refuses: {spec.rung.name} on {spec.hw.name} with lane "
            f"{lane_label(spec.lane)} "
            f"needs at least {plan.peak_bytes / GiB:.2f} GiB (smallest shape tried: seq_len "
            f"{s.seq_len}, micro_batch {s.micro_batch}, checkpointing "
            f"{'on' if s.checkpointing else 'off'}) but the budget is "
            f"{plan.budget_bytes / GiB:.2f} GiB. Ways out: {ways}. `plan.force=true` runs it "
            f"anyway (recorded).")


def run_eta(cfg, spec, plan: Plan) -> dict | None:
    from mens.plan.eta import eta
    return eta(cfg, spec, plan)


def render(spec, plan: Plan, forced: bool = False, eta: dict | None = None) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    buf = StringIO()
    con = Console(file=buf, width=100, force_terminal=False, color_system=None)
    rev = spec.rung.revision or "unpinned"
    from mens.data.select import data_label, user_data

    what = f"data {data_label(spec.data)}" if user_data(spec) else f"spoke {spec.spoke.name}"
    from mens.source.gguf import describe, is_gguf   # a GGUF: its wheel, version and sha256

    model = describe(spec.rung) if is_gguf(spec.rung) else \
        spec.rung.path or f"{spec.rung.repo_id}@{spec.rung.commit or rev}"
    con.print(f"mens plan · {spec.rung.name} ({model}, init {spec.rung.init}) · lane "
              f"{lane_label(spec.lane)} {spec.lane.precision} · {what} · hw {spec.hw.name} "
              f"({spec.hw.backend}, {spec.hw.memory_gb:g} GiB)")
    if plan.params_total:
        con.print(params_line(spec, plan))
    t = Table(show_edge=False)
    t.add_column("component")
    t.add_column("GiB", justify="right")
    t.add_column("what")
    for k, v in plan.components.items():
        what = WHAT.get(k, "")
        if k == "teacher" and spec.lane.distill.teacher_url and not v:
            what = f"distill teacher: served at {spec.lane.distill.teacher_url} (its memory)"
        t.add_row(k, f"{v / GiB:.3f}", what)
    t.add_row("sum", f"{plan.raw_bytes / GiB:.3f}", "analytic model × cell coefficients")
    label = ("calibrated" if plan.calibrated else
             "external" if plan.external else
             "UNCALIBRATED, fitted" if plan.fitted else "UNCALIBRATED")
    own = plan.world_size == 1 or plan.cell in load_contract(spec.plan.contract)["cells"]
    t.add_row("+ margin", f"{(plan.peak_bytes - plan.raw_bytes) / GiB:.3f}",
              f"{plan.uncertainty:.0%} ({label} cell {plan.cell}"
              f"{'' if own else ': no fit of its own, one device’s coefficients'})")
    if plan.external:
        t.add_row("", "", f"held-out error on published measurements from: "
                          f"{', '.join(plan.sources)}")
    t.add_row("predicted peak", f"{plan.peak_bytes / GiB:.3f}",
              f"per device, each of {plan.world_size} ({plan.strategy})"
              if plan.world_size > 1 else "")
    t.add_row("budget", f"{plan.budget_bytes / GiB:.3f}", _budget_line(spec))
    t.add_row("headroom", f"{plan.headroom_bytes / GiB:.3f}", "budget − predicted peak")
    con.print(t)
    s = plan.shape
    verdict = "FITS" if plan.fits else ("REFUSES — FORCED by plan.force=true" if forced
                                        else "REFUSES")
    devices = f" × {plan.world_size} devices" if plan.world_size > 1 else ""
    con.print(f"verdict: {verdict} · strategy {plan.strategy} · seq_len {s.seq_len} · "
              f"micro_batch {s.micro_batch} × grad_accum {plan.grad_accum}{devices} = "
              f"global_batch {plan.global_batch} · gradient "
              f"checkpointing {'on' if s.checkpointing else 'off'} · packing "
              f"{'on' if s.packing else 'off'} · {len(plan.trials)} shape(s) tried")
    if plan.speed:
        devices = f" over {plan.world_size} devices" if plan.world_size > 1 else ""
        con.print(f"throughput estimate: ~{plan.speed['tokens_per_s']:,.0f} tokens/s through "
                  f"training rows{devices} ({plan.speed['how']})")
    for line in communication_lines(plan):
        con.print(line)
    for line in sampling_lines(plan.sampling):
        con.print(line)
    for line in cost_lines(plan.cost, eta):
        con.print(line)
    if plan.signal:
        con.print(f"{'WARNING' if plan.signal['warn'] else 'note'}: {plan.signal['line']}")
    for note in spec.notes:
        con.print(f"note: {note}")
    for way in plan.ways_out:
        con.print(f"way out: {way}")
    return buf.getvalue().rstrip()


def short_count(n: int) -> str:
    """30532122624 → 30.53B; 596049920 → 596.05M"""
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"


def params_line(spec, plan: Plan) -> str:
    """The exact count (and a mixture of experts' active count: the weights one token uses,
    mens.plan.memory.Arch.params), what trains, and a LoRA's adapter size (fp32 on disk and in
    training) — known before anything loads."""
    moe = (f" ({short_count(plan.params_active)} active, {plan.experts} experts, "
           f"{plan.experts_per_tok} routed)" if plan.experts else "")
    line = (f"parameters: {plan.params_total:,} = {short_count(plan.params_total)}{moe} "
            f"(exact, from the architecture) · trainable {plan.params_trainable:,} "
            f"({plan.params_trainable / plan.params_total:.2%})")
    lora = spec.lane.lora if spec.lane.method != "full" else None
    if lora:
        experts = ", experts included" if getattr(lora, "experts", False) else ""
        line += (f" · adapter r={lora.r} on {', '.join(lora.targets)}{experts}: "
                 f"{plan.params_trainable * 4 / 2**20:,.1f} MiB fp32")
    return line


def communication_lines(plan: Plan) -> list[str]:
    """Several devices: what the strategy moves per step, over which link, its seconds and the
    speed-up it leaves (plan.json's `communication`, mens.plan.comm); LoRA's is said small."""
    c = plan.communication
    if not c:
        return []
    where = (f"{c['nodes']} nodes × {c['devices']} devices" if c["nodes"] > 1
             else f"{c['devices']} devices")
    ops = "; ".join(f"{o['op']} of {o['what']}: {o['bytes'] / 1e9:,.3g} GB × "
                    f"{o['per_micro_step']:g} per micro-step" for o in c["ops"])
    out = [f"communication ({c['strategy']} over {where}): {ops}"]
    if c["s_per_micro_step"] is None:
        out.append(f"  NOT in the time: {c['bus_how']} — the estimate scales linearly with "
                   f"devices (give hw.link.intra_gbs / inter_gbs)")
        return out
    out.append(f"  ring over {c['bus_gbs']:,.0f} GB/s ({c['bus_how']}): "
               f"{c['s_per_micro_step'] * 1e3:,.1f} ms per micro-step"
               + (f", {c['share']:.1%} of the step" if "share" in c else ""))
    if "speedup_vs_one_device" in c:
        node = (f"; vs one node ({c['devices']} devices) ~{c['speedup_vs_one_node']:.2f}× of "
                f"{c['nodes']}" if "speedup_vs_one_node" in c else "")
        out.append(f"  speed-up vs one device ~{c['speedup_vs_one_device']:.2f}× of "
                   f"{c['linear']} (≤ {c['speedup_if_overlapped']:.2f}× if it all overlapped)"
                   f"{node}; {c['overlap']}")
    if c["strategy"] == "ddp" and plan.params_trainable < plan.params_total:
        small = "small: " if c.get("share", 1) < 0.05 else ""
        out.append(f"  {small}LoRA's all-reduce moves the adapter's gradients only "
                   f"({plan.params_trainable / plan.params_total:.2%} of the weights, "
                   f"{c['bytes_per_optimizer_step'] / 2**20:,.1f} MiB per optimizer step)")
    return out


def sampling_lines(d: dict | None) -> list[str]:
    """An objective that samples (grpo): its memory phase by phase, each term with its formula
    (plan.json's `sampling`, mens.plan.rl.breakdown)."""
    if not d:
        return []
    g, lp = d["generation_bytes"], d["logprob"]
    peak = d["generation_peak_bytes"]
    if d["generation"] == "server":
        where = (f"in the generation server (lane.grpo.generation=server), counted as `server` "
                 f"{d['server_bytes'] / GiB:.3f} GiB on this device with its own base weights — "
                 f"a server on another machine costs this one nothing")
    else:
        where = ("SETS THE PEAK: above the training transients " if d["generation_sets_peak"]
                 else "below the training transients ") + \
            f"({d['training_transients_bytes'] / GiB:.3f} GiB) it precedes"
    calls = (f"{d['generation_calls']} generate calls of ≤ {d['generation_rows']} rows"
             if d["generation_calls"] > 1 else f"one generate call of {d['generation_rows']} rows")
    return [
        f"sampling: each optimizer step samples its window's {d['window_rows']} rows in {calls} "
        f"(lane.grpo.generation_batch_size={d['generation_rows']}: {d['generation_why']})" +
        (f"; REFUSED: {d['generation_blocked']}" if d.get("generation_blocked") else ""),
        f"sampling memory (one call's {d['generation_rows']} rows; a training pass "
        f"{d['rows']} rows = micro_batch × G {d['group']}; prompt ≤ "
        f"{d['prompt_tokens']} + completion {d['completion_tokens']} tokens):",
        f"  generation {peak / GiB:.3f} GiB: KV cache {g['kv_cache'] / GiB:.3f} "
        f"({d['formulas']['kv_cache']}) + its growth {g['kv_growth'] / GiB:.3f} + prefill "
        f"{g['prefill'] / GiB:.3f} + sampling logits {g['sampling_logits'] / GiB:.3f}; {where}",
        f"  log-prob pass: logits {lp['logits_bytes'] / GiB:.3f} GiB ({d['formulas']['logits']})",
        f"  reference: {d['reference']}" + (
            f"; its logits add {lp['reference_logits_bytes'] / GiB:.3f} GiB "
            f"({d['formulas']['reference_logits']})" if lp["reference_logits_bytes"] else "")]


PART = {"policy": "policy rows", "step_forward": "forwards without grad",
        "communication": "gradient communication",
        "reference": "reference (once)", "generation": "generation", "oracle": "oracle"}


def cost_lines(cost: dict | None, eta: dict | None) -> list[str]:
    """The objective's line (what a record costs beyond SFT's one row, each part's share and
    whether it is measured or assumed), what is assumed, and the ETA."""
    if not cost:
        return [f"ETA: none — {eta['why']}"] if eta and eta.get("why") else []
    out = []
    shares = ", ".join(f"{PART.get(k, k)} {v['share']:.0%} ({v['basis']})"
                       for k, v in cost["parts"].items())
    if cost["objective"] != "sft":
        ratio = cost["record_tokens_per_s"] / cost["sft_record_tokens_per_s"]
        out.append(f"objective {cost['objective']}: per record {cost['per_record']} → "
                   f"~{cost['record_tokens_per_s']:,.0f} record tokens/s ({ratio:.2f}× SFT's "
                   f"~{cost['sft_record_tokens_per_s']:,.0f} at this shape); time: {shares}")
        out.append(f"  counted from the code: {cost['where']}")
        out += [f"  measured: {m}" for m in cost["measured"]
                if not m.startswith("training rows")]
        out += [f"  assumed: {a}" for a in cost["assumed"]]
    if eta and eta.get("hours") is not None:
        parts = eta["hours_by_part"]
        split = "" if len(parts) < 2 else " (" + ", ".join(
            f"{PART.get(k, k)} {_dur(h)}" for k, h in parts.items()) + ")"
        bound = f"; {eta['bound']}" if eta["bound"] else ""
        est = " — an ESTIMATE" if eta["estimate"] else ""
        out.append(f"ETA: ~{_dur(eta['hours'])} of training{split} for {eta['tokens']:,.0f} "
                   f"record tokens ({eta['tokens_how']}{est}{bound})")
        if eta.get("oracle"):
            o = eta["oracle"]
            typical = (f"measured on the warm start: {o['measured']}" if o.get("measured")
                       else "the dev host's measurement above")
            out.append(f"  oracle: {_dur(parts['oracle'])} ({typical}); at most "
                       f"{_dur(o['bound_hours'])} if every answer ran to its timeout "
                       f"({o['bound_how']}): the ETA's upper end ~{_dur(o['hours_upper'])}")
    elif eta:
        out.append(f"ETA: none — {eta['why']}")
    return out


def _dur(hours: float) -> str:
    return (f"{hours:.2f} h" if hours >= 1 else f"{hours * 60:.1f} min" if hours >= 1 / 60
            else f"{hours * 3600:.1f} s")


def _budget_line(spec) -> str:
    d = spec.detected
    if d and not d.get("memory_overridden"):   # the budget came from a live reading
        return f"detected: {d['source']}"
    h = spec.hw.headroom
    return (f"{spec.hw.memory_gb:g} GiB × {h.advisory_frac:g} − {h.reserve_gb:g} reserved, "
            f"− max({h.frac:.0%}, {h.min_gb:g} GiB) headroom")
