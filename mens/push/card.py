"""The model card (README.md) of a pushed run, rendered from the run dir alone.

The YAML is built with huggingface_hub's ModelCardData / EvalResult, so it is exactly what the
Hub parses: base_model, library_name, pipeline_tag, tags, datasets, license (the base's, else
`other` with a note) and a model-index of the tuned model's eval.json rows (each metric's
value is the tuned model's; its interval and the base's value are in the metric's name). The
body carries the evidence a reader wants: the data (spoke, sources, the data lock), the
training (lane, shape, steps, tokens, time, hardware, predicted vs measured peak and the plan's
cell), the evaluation tables with intervals, the gate receipt, how to run it, the limits.

What the run dir lacks is said, never invented: no eval.json → "not evaluated"; eval.json or
gate.json that judged other weights (artifact_sha256 differs) → stale, left out of the
model-index. Nothing secret is read: only named fields of spec.yaml, never the whole spec.
"""
from __future__ import annotations

from pathlib import Path

from mens.eval.report import GROUPS
from mens.run.evalrow import MetricRow
from mens.run.receipt import artifact_sha256, read_receipt, receipt_status
from mens.run.rundir import RunDir
from mens.run.telemetry import Event
from mens.push.base import LICENSE_FILE, base_identity, base_license, gib
from mens.push.usage import usage_section

METHOD_NAMES = {"lora": "LoRA", "qlora": "QLoRA"}   # as the papers and PEFT spell them
INDEX_GROUPS = ("in_domain", "benchmark")     # the model-index: the run's own task + lm-eval


def _eval(run: Path) -> tuple[dict | None, str]:
    """(eval.json or None, why it is left out)."""
    from mens.eval.run import read

    ev = read(run)
    if not ev:
        return None, f"not evaluated (no eval.json: `mens eval run=<run dir>` writes one)"
    if ev.get("artifact_sha256") and ev["artifact_sha256"] != artifact_sha256(run):
        return None, ("not evaluated for these weights: eval.json judged other weights (the "
                      "adapter changed since); re-run `mens eval`")
    return ev, ""


def _wandb(run: Path, spec: dict) -> str:
    import os

    from mens.config.schema import DEFAULT_WANDB_PROJECT

    lg = spec.get("logger") or {}
    if lg.get("kind") != "wandb":
        return f"none: the run logged to `{lg.get('kind')}`, not wandb."
    # the training run's wandb dir is the first one made in the run dir (eval/export add later
    # runs of their own job types); names start with the start time, so sorted = chronological
    found = sorted(run.glob("wandb/*run-*/run-*.wandb"), key=lambda p: p.parent.name)
    if not found:
        return "the run asked for wandb, but no wandb run files are in the run dir."
    rid = found[0].stem.removeprefix("run-")
    project = lg.get("project") or os.environ.get("WANDB_PROJECT") or DEFAULT_WANDB_PROJECT
    ent = lg.get("entity")
    where = (f"https://wandb.ai/{ent}/{project}/runs/{rid}" if ent
             else f"project `{project}`, run id `{rid}`")
    off = " (logged offline: visible once `wandb sync` uploaded it)" \
        if found[0].parent.name.startswith("offline-") else ""
    return f"{where}{off}"


def eval_results(ev: dict | None) -> list:
    """EvalResults of the in-domain and benchmark rows with a tuned value."""
    from huggingface_hub import EvalResult

    out = []
    conf = (ev or {}).get("spec", {}).get("confidence", 0.95)
    for r in sorted((ev or {}).get("rows", []), key=_order):
        t = r.get("tuned") or {}
        if r.get("group") not in INDEX_GROUPS or t.get("value") is None:
            continue
        lo, hi = (t.get("ci") or [None, None])[:2]
        base = (r.get("base") or {}).get("value")
        label = f"{r['metric']} (tuned; {conf:.0%} CI [{lo:.4g}, {hi:.4g}]" if lo is not None \
            else f"{r['metric']} (tuned"
        label += f"; base {base:.4g})" if base is not None else ")"
        out.append(EvalResult(
            task_type="text-generation", task_name=f"{r['group']}: {r['task']}",
            dataset_type=r["task"], dataset_name=r["task"], dataset_config=r["group"],
            dataset_split="eval" if r["group"] == "in_domain" else None,
            metric_type=r["metric"], metric_value=t["value"], metric_name=label,
            metric_config=f"n={r.get('n')}"))
    return out


def _order(r: dict):
    g = r.get("group")
    return (GROUPS.index(g) if g in GROUPS else 9, r.get("name", ""))


def _table(ev: dict) -> list[str]:
    lines = ["| group | metric | n | base | tuned | delta | gain |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in sorted(ev.get("rows", []), key=_order):
        row = MetricRow.of(r)
        lines.append(f"| {r['group']} | {r['name']}{' (%)' if row.rate else ''} | {r.get('n')} | "
                     + " | ".join(row.text(s) for s in ("base", "tuned", "delta", "gain")) + " |")
    return lines


def model_card(run_dir: Path | str, repo_id: str, gguf_repo: str | None = None,
               gguf_files: dict[str, str] | None = None) -> str:
    """README.md of `repo_id` for the run in run_dir (YAML front matter + body). gguf_repo:
    where the GGUFs go; gguf_files: their names there ({file: what}, mens.push.model)."""
    from huggingface_hub import ModelCard, ModelCardData

    run = Path(run_dir)
    rd = RunDir(run)
    spec, plan, summ = rd.read_spec(), rd.read_json(RunDir.PLAN), rd.read_summary()
    lane, r = spec.get("lane") or {}, spec.get("rung") or {}
    method, objective = lane.get("method", "lora"), lane.get("objective", "sft")
    full = rd.artifact_kind == RunDir.MODEL
    base = base_identity(spec)
    lic, lic_note = base_license(spec)
    ev, ev_why = _eval(run)
    data = spec.get("data") or {}
    spoke = (spec.get("spoke") or {}).get("name")
    hub_data = [data["name"]] if data.get("source") == "hf" and data.get("name") else None
    results = eval_results(ev)
    card_data = ModelCardData(
        base_model=base["repo_id"], library_name="transformers" if full else "peft",
        pipeline_tag="text-generation", license=lic,
        license_name="base-model-license" if lic == "other" else None,
        license_link=LICENSE_FILE if lic == "other" else None,
        tags=["mens", method, objective, *([spoke] if spoke else []),
              *([] if full else ["peft", "lora"]), "text-generation"],
        datasets=hub_data, model_name=repo_id.split("/")[-1], eval_results=results or None)
    pinned = f" at revision `{base['pin']}`" if base["pin"] else " (revision not pinned)"
    domain = (spec.get("spoke") or {}).get("domain")
    what = "A fully fine-tuned" if full else f"A {METHOD_NAMES.get(method, method)} adapter for"
    body = [f"# {repo_id.split('/')[-1]}", "",
            f"{what} [{base['repo_id']}](https://huggingface.co/{base['repo_id']}){pinned}, "
            f"trained with mens ({objective}) on the `{spoke}` spoke"
            + (f" — {domain}" if domain else "") + ". Everything below is read from the run's "
            f"own files (spec.yaml, plan.json, summary.json, telemetry.jsonl, eval.json, "
            f"gate.json).", "",
            f"License: `{lic}` — {lic_note}.", ""]
    body += _data_section(spec, rd)
    body += _train_section(spec, plan, summ, base)
    body += ["## How it was evaluated", ""]
    if summ.get("eval_loss_base") is not None:
        body += [f"At the end of training, held-out loss on {summ.get('eval_records')} records "
                 f"({summ.get('eval_tokens')} tokens): base {summ['eval_loss_base']:.4f} → tuned "
                 f"{summ.get('eval_loss_adapter', float('nan')):.4f} "
                 f"({summ.get('eval_improvement_pct', 0):+.1f} %).", ""]
    if ev is None:
        body += [f"`mens eval`: {ev_why}.", ""]
    else:
        conf = ev.get("spec", {}).get("confidence", 0.95)
        body += [f"`mens eval` ({ev.get('duration_s', 0):.0f} s): {conf:.0%} intervals, "
                 f"bootstrap over items, paired base vs tuned; gain > 0 is better (loss: the "
                 f"share of the base's loss removed; rates: points). The model-index above holds "
                 f"the tuned model's in-domain and benchmark values.", "", *_table(ev), ""]
    body += _gate_section(run)
    body += usage_section(repo_id, base, lane, full, gguf_repo, gguf_files or {})
    body += _limits(spec, plan, summ, ev, base)
    # no date or local path in the card: a re-push of the same run must upload nothing new
    body += ["## Tracking", "", f"wandb: {_wandb(run, spec)}", "", "Card written by `mens push`.", ""]
    text = f"---\n{card_data.to_yaml()}\n---\n\n" + "\n".join(body)
    return str(ModelCard(text))      # parsed once here: a card the Hub cannot read fails now


def _over(summ: dict) -> str:
    """Said when the run measured more than the plan predicted (the plan was wrong for it)."""
    pred, meas = summ.get("predicted_peak_bytes"), summ.get("measured_peak_bytes")
    if not pred or not meas or meas <= pred:
        return ""
    return f" — the measured peak was ABOVE the prediction by {meas / pred - 1:.0%}"


def _data_section(spec: dict, rd: RunDir) -> list[str]:
    sp, data = spec.get("spoke") or {}, spec.get("data") or {}
    out = ["## What it is for", ""]
    if data.get("source", "spoke") == "spoke":
        out.append(f"The `{sp.get('name')}` spoke: {sp.get('domain', '')}. "
                   f"Profile: {', '.join(sp.get('profile') or [])}.")
        rows = (rd.telemetry_rows(Event.DATA) or [{}])[0].get("by_source") or {}
        if sp.get("sources"):
            out += ["", "| source | weight | records selected |", "|---|---:|---:|"]
            out += [f"| {s['name']} | {s.get('weight')} | "
                    f"{(rows.get(s['name']) or {}).get('selected', '—')} |" for s in sp["sources"]]
    elif data.get("source") == "hf":
        out.append(f"Trained on the Hub dataset `{data.get('name')}` (split `{data.get('split')}`"
                   f", revision `{data.get('revision') or 'main'}`).")
    else:
        paths = data.get("path")
        names = [Path(str(p)).name for p in (paths if isinstance(paths, list) else [paths])]
        out.append(f"Trained on the user's files: {', '.join(names)}.")
    lock = spec.get("data_lock") or []
    if lock:
        out += ["", "Data lock (the exact bytes trained on):", ""]
        for x in lock:
            what = x.get("corpus") or (Path(x["path"]).name if x.get("path") else None) \
                or f"{x.get('dataset')}[{x.get('split')}]@{x.get('revision')}"
            pin = x.get("sha256") or x.get("fingerprint")
            out.append(f"- `{what}`: sha256 `{pin}`" + (f", {x['bytes']} bytes" if x.get("bytes")
                                                          else ""))
    else:
        out += ["", "No data lock was recorded for this run."]
    return out + [""]


def _train_section(spec, plan, summ, base) -> list[str]:
    lane, tr, hw = spec.get("lane") or {}, spec.get("train") or {}, spec.get("hw") or {}
    lora = lane.get("lora") or {}
    det = spec.get("detected") or {}
    out = ["## How it was trained", "",
           f"- lane: `{lane.get('name')}` — method {lane.get('method')}, objective "
           f"{lane.get('objective')}, precision {lane.get('precision')}"
           + (f"; LoRA r={lora.get('r')}, alpha={lora.get('alpha')}, dropout "
              f"{lora.get('dropout')}, targets {', '.join(lora.get('targets') or [])}"
              if lane.get("method") != "full" else ""),
           f"- base: `{base['repo_id']}` @ `{base['pin'] or 'unpinned'}` (rung `{base['name']}`"
           f", init {(spec.get('rung') or {}).get('init')})",
           f"- shape: seq_len {tr.get('seq_len')} × micro_batch {tr.get('micro_batch')} × "
           f"grad_accum {tr.get('grad_accum')} (global batch {tr.get('global_batch')}), packing "
           f"{tr.get('packing')}",
           f"- optimizer: {(lane.get('optimizer') or {}).get('name')} lr "
           f"{(lane.get('optimizer') or {}).get('lr')}, schedule {tr.get('schedule')}, seed "
           f"{tr.get('seed')}; curriculum `{(spec.get('curriculum') or {}).get('name')}`",
           f"- steps {summ.get('steps')} ({summ.get('epochs')} epochs), {summ.get('train_tokens')}"
           f" tokens, {summ.get('duration_s')} s ({summ.get('tokens_per_sec')} tokens/s)",
           f"- hardware: {det.get('device_name') or hw.get('description')} ({hw.get('backend')}"
           f"), {summ.get('world_size', 1)} process(es), strategy {summ.get('strategy')}",
           f"- memory: predicted peak {gib(summ.get('predicted_peak_bytes'))}, measured "
           f"{gib(summ.get('measured_peak_bytes'))} ({summ.get('measured_peak_kind', '')}); "
           f"plan cell `{plan.get('cell')}`, "
           + ("calibrated" if plan.get("calibrated") else "UNCALIBRATED (analytic)")
           + (f" ±{plan['uncertainty']:.0%}" if plan.get("uncertainty") else "")
           + _over(summ),
           f"- trainable parameters: {summ.get('trainable_params')} of {summ.get('total_params')}",
           f"- software: " + ", ".join(f"{k} {v}" for k, v in (spec.get("versions") or {}).items()
                                     if v), ""]
    return out


def _gate_section(run: Path) -> list[str]:
    receipt = read_receipt(run)
    status, why = receipt_status(run, receipt)
    if status == "none":
        return ["Gate: not gated (no gate.json; `mens gate run=<run dir>` writes one).", ""]
    if status == "void":
        return [f"Gate: void — {why}.", ""]
    out = [f"Gate (`mens gate`, {receipt.get('metric')}): **{receipt.get('verdict', '?').upper()}**"]
    out += [f"- {x}" for x in receipt.get("reasons") or []]
    return out + [""]


def _limits(spec, plan, summ, ev, base) -> list[str]:
    out = ["## Limitations", ""]
    r = spec.get("rung") or {}
    if base["bundled"]:
        out.append(f"- The base is mens's embedded `{r.get('name')}` model (a few million "
                   f"parameters): a test vehicle, not a useful assistant.")
    if r.get("init") == "random":
        out.append("- The base was randomly initialised (rung.init=random): the weights mean "
                   "nothing outside this run.")
    if ev is None:
        out.append("- Not evaluated beyond the training run's held-out loss.")
    else:
        ns = sorted({x.get("n") for x in ev.get("rows", []) if x.get("n") is not None})
        if ns:
            size = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
            out.append(f"- Evaluated on {size} items per metric: intervals are wide at these "
                       f"sizes; read the interval, not the point.")
    if not plan.get("calibrated"):
        out.append(f"- The memory plan's cell `{plan.get('cell')}` was not calibrated on "
                   f"measurements: the predicted peak is analytic.")
    p, m = summ.get("predicted_peak_bytes"), summ.get("measured_peak_bytes")
    if p and m and m > p:
        out.append(f"- The measured peak exceeded the prediction by {100 * (m / p - 1):.0f} %.")
    out.append("- Trained for one spoke: other uses were measured only as far as the tables "
               "above show (collateral rows).")
    return out + [""]
