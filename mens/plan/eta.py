"""How long a planned run trains: its training tokens (the spoke's manifests or the user's data ×
the curriculum's epochs) times what the objective spends per record token (mens.plan.speed.Cost:
rows, reference, sampling, oracle). `mens plan` prints it, `mens cloud estimate` prices it,
`mens recommend` shows it — one count, one cost. Imports no torch (planning only).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from mens.errors import ConfigError, MensError
from mens.plan.speed import Cost
from mens.resources import CORPORA


def training_tokens(cfg, spec) -> dict:
    """Tokens one training run processes: Σ over epochs of the records the curriculum admits ×
    tokens per record (a pair counts its longer side: one row's tokens per record), and the
    distinct records' tokens among them (a reference scores each record once). From the spoke's
    manifests (no tokenizer needed) or the user's data; an estimate where it is, said."""
    if cfg.cloud.tokens:
        t = int(cfg.cloud.tokens)
        return {"tokens": t, "distinct": t, "records": None, "estimate": False,
                "how": "cloud.tokens (given; every token a distinct record's, records of "
                       "seq_len tokens)"}
    from mens.data.select import user_data
    if user_data(spec):
        return user_tokens(cfg, spec)
    name = spec.spoke.name
    lengths, manifest = CORPORA / name / "lengths.json", CORPORA / name / "manifest.json"
    if not (lengths.is_file() and manifest.is_file()):
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
    # the caps only rise: the widest epoch holds every record an earlier one saw
    return {"tokens": int(sum(epochs) * per), "distinct": int(max(epochs, default=0) * per),
            "records": sum(epochs), "how": how, "estimate": True}


def user_tokens(cfg, spec) -> dict:
    """The user's data (data=file|hf): its training records' tokens, each cut at the run's
    seq_len (packed rows carry no padding), × the curriculum's epochs. Measured with the run's
    tokenizer where it is here (mens.data.lengths, cached), else estimated from characters."""
    from mens.data import lengths as L
    from mens.config.objectives import card
    from mens.data.select import data_label, dataset

    ds = dataset(spec.data, card(spec.lane), spec.curriculum.phases)
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
    return {"tokens": per_epoch * epochs, "distinct": per_epoch, "records": len(lens) * epochs,
            "how": how, "estimate": enc is None}


def cost_of(plan) -> Cost | None:
    """The plan's Cost (plan.cost is its dict, as plan.json keeps it)."""
    d = getattr(plan, "cost", None)
    return None if not d else Cost(**{k: d[k] for k in Cost.__dataclass_fields__})


def trained(tokens: dict, spec, plan) -> tuple[float, float, float | None, str]:
    """(record tokens trained on, the distinct records' tokens among them, records, what
    bounded them): every counted one, or train.max_steps optimizer steps' when they come first
    (a step takes global_batch packed rows of seq_len, or global_batch records unpacked)."""
    total, distinct = tokens["tokens"], tokens.get("distinct") or tokens["tokens"]
    records = tokens.get("records")
    steps = int(getattr(spec.train, "max_steps", -1) or -1)
    if steps <= 0:
        return total, distinct, records, ""
    per = total / records if records else plan.shape.seq_len   # tokens per record
    if plan.shape.packing:
        reached, n = steps * plan.global_batch * plan.shape.seq_len, None
    else:
        n = steps * plan.global_batch
        reached = n * per
    if reached >= total:
        return total, distinct, records, ""
    return reached, min(reached, distinct), (n if n is not None else reached / per), \
        f"train.max_steps={steps}: {steps} optimizer steps of global_batch {plan.global_batch}"


def hours(cost: Cost | None, tokens: dict, spec, plan) -> float | None:
    if cost is None:
        return None
    total, distinct, records, _ = trained(tokens, spec, plan)
    return cost.seconds(total, distinct, records) / 3600


def eta(cfg, spec, plan) -> dict | None:
    """What `mens plan` prints and plan.json keeps: the hours, each part's, and what they
    stand on; or why there are none."""
    cost = cost_of(plan)
    if cost is None:
        return {"hours": None, "why": f"hw {spec.hw.name} ({spec.hw.backend}) states no TFLOPS "
                                      f"(hw.tflops_bf16): no time estimate"}
    try:
        tokens = training_tokens(cfg, spec)
    except MensError as e:      # no count: said, never a guessed one
        return {"hours": None, "why": e.message}
    except OSError as e:        # the data cannot be read to count (training will say so too)
        return {"hours": None, "why": f"the training tokens cannot be counted: {e}"}
    total, distinct, records, bound = trained(tokens, spec, plan)
    oracle = oracle_time(cost, spec, plan)
    if oracle and oracle.get("s") is not None:   # the warm start's measured latency replaces
        cost = replace(cost, parts={**cost.parts, "oracle": {   # the dev host's figure
            **cost.parts["oracle"], "s": oracle["s"], "basis": "measured on the warm start"}})
    parts = cost.part_seconds(total, distinct, records)
    out = {"hours": round(sum(parts.values()) / 3600, 6), "tokens": total,
           "distinct_tokens": distinct, "records": records, "tokens_how": tokens["how"],
           "estimate": tokens["estimate"], "bound": bound,
           "hours_by_part": {k: round(v / 3600, 6) for k, v in parts.items()}}
    if oracle:   # the worst case: every answer runs to grpo.oracle_timeout_s
        worst = replace(cost, parts={**cost.parts, "oracle": {**cost.parts["oracle"],
                                                              "s": oracle["bound_s"]}})
        w = worst.part_seconds(total, distinct, records)
        out["oracle"] = {**oracle, "bound_hours": round(w["oracle"] / 3600, 6),
                         "hours_upper": round(sum(w.values()) / 3600, 6)}
    return out


def oracle_time(cost: Cost, spec, plan) -> dict | None:
    """grpo's oracle per micro-step (`s`, `bound_s`: the cost's unit) — one call per optimizer
    step judges its window's answers (mens.objective.grpo.Grpo.open_window), so a micro-step
    carries 1/grad_accum of it: what the call typically takes (the dev host's measurement, or
    the warm start's own telemetry when it was a grpo run on the same check) and its bound —
    the window's answers judged by ORACLE_WORKERS processes, each answer allowed
    grpo.oracle_timeout_s before it is killed (mens.synth.oracle: per record)."""
    import math

    from mens.config.objectives import ORACLE_WORKERS
    if "oracle" not in cost.parts:
        return None
    grpo = spec.lane.grpo
    accum = int(plan.grad_accum)
    answers = plan.shape.micro_batch * accum * int(grpo.num_generations)
    timeout = float(grpo.oracle_timeout_s)
    window_s = math.ceil(answers / ORACLE_WORKERS) * timeout
    out = {"answers_per_window": answers, "grad_accum": accum, "timeout_s": timeout,
           "workers": ORACLE_WORKERS, "bound_window_s": window_s, "bound_s": window_s / accum,
           "bound_how": f"ceil({answers} answers / {ORACLE_WORKERS} oracle processes) × "
                        f"grpo.oracle_timeout_s={timeout:g} s per optimizer step's window" +
                        (" (partial rewards judge each answer's pieces too: more)"
                         if grpo.reward == "partial" else "")}
    seen = warm_start_latency(spec.train.init_adapter, spec.spoke.admission.check)
    if seen:
        out.update(s=seen["s_per_answer"] * answers / accum, measured=seen["how"])
    return out


def warm_start_latency(init_adapter: str | None, check: str) -> dict | None:
    """Seconds per answer the oracle took in the warm start's own grpo steps (its
    telemetry.jsonl TRAIN_STEP rows: oracle/seconds over oracle/answers), when it judged with the
    same check (its spec.yaml); None otherwise."""
    import yaml

    from mens.run.rundir import RunDir
    from mens.run.telemetry import Event
    if not init_adapter:
        return None
    run = next((RunDir(d) for d in (Path(init_adapter), Path(init_adapter).parent)
                if (d / RunDir.TELEMETRY).is_file() and (d / RunDir.SPEC).is_file()), None)
    if run is None:
        return None
    try:
        saved = yaml.safe_load(run.spec.read_text()) or {}
        rows = run.telemetry_rows(Event.TRAIN_STEP)
    except (OSError, ValueError, yaml.YAMLError):
        return None
    if ((saved.get("spoke") or {}).get("admission") or {}).get("check") != check:
        return None
    steps = [(r["oracle/seconds"], r["oracle/answers"]) for r in rows
             if r.get("oracle/seconds") is not None and r.get("oracle/answers")]
    if not steps:
        return None
    secs, answers = sum(s for s, _ in steps), sum(a for _, a in steps)
    return {"s_per_answer": secs / answers, "steps": len(steps),
            "how": f"{run.path}: {secs:.2f} s over {answers:g} answers in {len(steps)} grpo "
                   f"steps ({check}), {secs / answers * 1e3:.1f} ms per answer"}
