"""`python -m mens.compare`: does the fine-tuned model answer measurably differently, and which
run to keep.

    python -m mens.compare run=<run dir>                 # before/after: base vs its adapter
    python -m mens.compare outputs/2026-11-30/*_train    # across runs (dirs or globs)

*Before/after* asks base and fine-tuned the spoke's first `compare.prompts` held-out prompts
(greedy, `compare.max_tokens`), side by side, and scores the held-out eval loss both ways with
the very function training used. Numbers: loss delta, the share of prompts whose greedy output
differs, where the outputs first diverge, token agreement, and the mean per-token KL divergence
KL(fine-tuned ‖ base) along the fine-tuned answer (> 0 even when greedy outputs agree).
*Across runs* tabulates the spec keys that differ and each run's metrics (final and eval loss,
tokens/s, predicted vs measured peak, duration), the runs' eval.json results with their
intervals and their gate verdicts (mens.compare.evals), and overlays the loss curves in a PNG.
Both write compare.md + compare.json (+ loss_curves.png) to `compare.out` or the command's dir.
"""
from __future__ import annotations

import glob
import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mens.errors import EXIT_OK, ConfigError
from mens.config.objectives import lane_fields
from mens.run.rundir import RunDir
from mens.run.telemetry import Event


def task(cfg: DictConfig, out_dir: Path) -> int:
    from mens.run.rundir import atomic_write

    from mens.compare.lineage import log_compare

    c = cfg.compare
    out = Path(c.out) if c.out else Path(out_dir)
    runs = named_runs(list(c.runs)) if c.runs else []
    if len(runs) >= 2:
        result = across(runs, out)
        md = across_md(result)
    elif cfg.run or runs:
        runs = [Path(cfg.run) if cfg.run else runs[0]]
        result = before_after(runs[0], c.prompts, c.max_tokens)
        md = before_after_md(result)
    else:
        raise ConfigError("nothing to compare: give `run=<run dir>` (base vs its fine-tune) or "
                          "two or more run dirs / globs (`python -m mens.compare outputs/*/*_train`).",
                          key="compare.runs")
    atomic_write(out / "compare.json", json.dumps(result, indent=2))
    atomic_write(out / "compare.md", md)
    log_compare(cfg.logger, runs, out, result)   # a wandb run of job_type eval (logger=wandb)
    print(md)
    print(f"mens: wrote {out / 'compare.md'} and compare.json"
          + (" and loss_curves.png" if "png" in result else ""))
    return EXIT_OK


# --- finding runs ------------------------------------------------------------------------------
def is_run(p: Path) -> bool:
    return RunDir(p).is_run


def named_runs(items: list[str]) -> list[Path]:
    """The runs `compare.runs` names, from dirs and globs (RunDir.find): a dir that is not a
    run contributes the runs below it (telemetry.jsonl at any depth)."""
    found: list[Path] = []
    for item in items:
        paths = [Path(p) for p in sorted(glob.glob(item))] if glob.has_magic(item) else [Path(item)]
        if not paths or not any(p.exists() for p in paths):
            raise ConfigError(f"compare: `{item}` matches nothing.", key="compare.runs")
        for p in paths:
            found += RunDir.find(p, itself=True, calibration=True)
    seen, runs = set(), []
    for p in found:
        if p.resolve() not in seen:
            seen.add(p.resolve())
            runs.append(p)
    if not runs:
        raise ConfigError(f"compare: no training run (telemetry.jsonl or summary.json) in "
                          f"{', '.join(items)}.", key="compare.runs")
    return runs


def _spec(run: Path) -> DictConfig:
    path = RunDir(run).spec
    if not path.is_file():
        raise ConfigError(f"{run}: no spec.yaml; give a run dir that `python -m mens` wrote.",
                          key="run")
    return OmegaConf.load(path)


# --- before / after ----------------------------------------------------------------------------
def load_models(run: Path, spec):
    """(slots, slot) for the base and for the fine-tuned model: one PeftModel for a LoRA run,
    two models for a full fine-tune."""
    from mens.serve.slots import BASE, Slots, Source

    rung = OmegaConf.to_container(spec.rung)
    seed = int(spec.train.seed)
    rd = RunDir(run)
    if rd.artifact_kind == RunDir.ADAPTER:
        slots = Slots(rung, [Source.parse(f"adapter={run}", key="run")], seed=seed)
        return (slots, slots.slots[BASE]), (slots, slots.slots["adapter"])
    if rd.artifact_kind == RunDir.MODEL:
        before = Slots(rung, [], seed=seed)
        after = Slots({**rung, "path": str(rd.artifact)}, [], seed=seed)
        return (before, before.slots[BASE]), (after, after.slots[BASE])
    raise ConfigError(f"{run}: neither adapter/ nor model/ — the run has not finished. Compare "
                      f"a run dir with summary.json.", key="run")


def eval_sets_loss(slots, slot, sets) -> dict:
    from mens.train.evaluate import eval_loss

    out = {}
    with slots.activate(slot):
        for role, (name, exs) in sets.items():
            out[role] = {"spoke": name, **eval_loss(slots.model, exs, 4, max(len(e) for e in exs),
                                                    desc=f"compare: eval {role} ({name})")}
    slots.model.eval()   # eval_loss leaves the model in train mode
    return out


def _kl_along(slots_a, slot_a, slots_b, slot_b, prompt: list[int], answer: list[int]) -> float | None:
    """Mean over answer tokens of KL(a ‖ b) between next-token distributions, teacher-forced."""
    import torch
    if not answer:
        return None
    ids = torch.tensor([prompt + answer], device=slots_a.device)            # (1, P+A)
    logp = []
    for slots, slot in ((slots_a, slot_a), (slots_b, slot_b)):
        with torch.inference_mode(), slots.activate(slot):
            logits = slots.model(input_ids=ids.to(slots.device)).logits[0].float().cpu()
        logp.append(torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1))   # (A, V)
    kl = (logp[0].exp() * (logp[0] - logp[1])).sum(-1)                      # (A,)
    return float(kl.mean())


def before_after(run: Path, n_prompts: int, max_tokens: int) -> dict:
    from tqdm.auto import tqdm

    from mens.data.formats import kind, turns
    from mens.data.select import eval_records
    from mens.serve.generate import GenRequest, generate
    from mens.data.prepare import eval_sets

    run = Path(run)
    spec = _spec(run)
    (b_slots, b), (a_slots, a) = load_models(run, spec)
    # held-out preference pairs are scored here on their chosen answers (token loss)
    sets = {role: (name, [x[0] if isinstance(x, tuple) else x for x in exs])
            for role, (name, exs) in eval_sets(spec, b_slots.tokenizer).items()}
    loss_base, loss_after = eval_sets_loss(b_slots, b, sets), eval_sets_loss(a_slots, a, sets)
    recs = [r if kind(r) == "chat" else {**r, "messages": turns(r)}
            for r in eval_records(spec)["eval"][1]][:n_prompts]
    rows = []
    for r in tqdm(recs, desc="compare: generate base and tuned", unit="prompt", leave=False):
        msgs = r["messages"]
        last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
        prompt = b_slots.encode_chat(msgs[:last_user + 1])
        room = min(max_tokens, b_slots.context - len(prompt))
        if room <= 0:
            continue
        req = GenRequest(tuple(prompt), room, temperature=0)
        gb, ga = generate(b_slots, b, req), generate(a_slots, a, req)
        n = max(len(gb.token_ids), len(ga.token_ids))
        same = sum(x == y for x, y in zip(gb.token_ids, ga.token_ids))
        first = next((i for i, (x, y) in enumerate(zip(gb.token_ids, ga.token_ids)) if x != y),
                     None if len(gb.token_ids) == len(ga.token_ids) else min(len(gb.token_ids),
                                                                             len(ga.token_ids)))
        rows.append({"id": r["id"], "prompt": msgs[last_user]["content"],
                     "reference": msgs[last_user + 1]["content"] if last_user + 1 < len(msgs) else None,
                     "base": gb.text, "tuned": ga.text, "differs": gb.token_ids != ga.token_ids,
                     "first_divergence": first, "token_agreement": same / n if n else 1.0,
                     "kl_tuned_base": _kl_along(a_slots, a, b_slots, b, prompt, ga.token_ids)})
    for s in {id(b_slots): b_slots, id(a_slots): a_slots}.values():
        s.close()
    kls = [x["kl_tuned_base"] for x in rows if x["kl_tuned_base"] is not None]
    firsts = [x["first_divergence"] for x in rows if x["first_divergence"] is not None]
    lb, la = loss_base["eval"]["loss"], loss_after["eval"]["loss"]
    summary = RunDir(run).read_summary()
    return {
        "mode": "before_after", "run": str(run), "spoke": spec.spoke.name, **lane_fields(spec.lane),
        "rung": spec.rung.name, "prompts": len(rows), "max_tokens": max_tokens,
        "eval_loss_base": lb, "eval_loss_tuned": la, "eval_loss_delta": la - lb,
        "eval_improvement_pct": 100 * (1 - la / lb), "eval_tokens": loss_base["eval"]["tokens"],
        "collateral": {"spoke": loss_base["collateral"]["spoke"],
                       "eval_loss_base": loss_base["collateral"]["loss"],
                       "eval_loss_tuned": loss_after["collateral"]["loss"]}
        if "collateral" in loss_base else None,
        "summary_eval_loss_base": summary.get("eval_loss_base"),
        "summary_eval_loss_tuned": summary.get("eval_loss_adapter"),
        "share_outputs_differ": sum(x["differs"] for x in rows) / len(rows) if rows else None,
        "mean_first_divergence": sum(firsts) / len(firsts) if firsts else None,
        "mean_token_agreement": sum(x["token_agreement"] for x in rows) / len(rows) if rows else None,
        "mean_kl_tuned_base": sum(kls) / len(kls) if kls else None,
        "rows": rows,
    }


def _cell(text, width: int = 80) -> str:
    if text is None:
        return ""
    text = " ".join(str(text).split())
    text = text if len(text) <= width else text[:width - 1] + "…"
    return text.replace("|", "\\|")


def _f(x, fmt: str = ".4f") -> str:
    return "—" if x is None else format(x, fmt)


def before_after_md(r: dict) -> str:
    c = r["collateral"] or {"spoke": "none", "eval_loss_base": None, "eval_loss_tuned": None}
    lines = [
        f"# Before/after: {r['run']}", "",
        f"{r['lane']} on {r['rung']}, spoke {r['spoke']}; {r['prompts']} held-out prompts, "
        f"greedy, at most {r['max_tokens']} tokens.", "",
        "| measure | value |", "|---|---|",
        f"| eval loss, base | {_f(r['eval_loss_base'])} |",
        f"| eval loss, fine-tuned | {_f(r['eval_loss_tuned'])} |",
        f"| eval loss delta (tuned − base) | {_f(r['eval_loss_delta'], '+.4f')} "
        f"({_f(r['eval_improvement_pct'], '.2f')} % better) |",
        f"| collateral ({c['spoke']}) eval loss base → tuned | {_f(c['eval_loss_base'])} → "
        f"{_f(c['eval_loss_tuned'])} |",
        f"| share of prompts whose greedy output differs | {_f(r['share_outputs_differ'], '.2f')} |",
        f"| mean first divergent token (differing prompts) | {_f(r['mean_first_divergence'], '.1f')} |",
        f"| mean token agreement | {_f(r['mean_token_agreement'], '.3f')} |",
        f"| mean KL(tuned ‖ base) per token | {_f(r['mean_kl_tuned_base'], '.5f')} |",
        "", "| prompt | base | fine-tuned | differs | first divergence |", "|---|---|---|---|---|"]
    for x in r["rows"]:
        lines.append(f"| {_cell(x['prompt'], 60)} | {_cell(x['base'])} | {_cell(x['tuned'])} | "
                     f"{'yes' if x['differs'] else 'no'} | {_f(x['first_divergence'], 'd')} |")
    return "\n".join(lines) + "\n"


# --- across runs -------------------------------------------------------------------------------
def _flat(d, prefix: str = "") -> dict:
    out = {}
    for k, v in (d or {}).items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _run_metrics(run: Path) -> dict:
    steps = RunDir(run).telemetry_rows(Event.TRAIN_STEP)
    s = RunDir(run).read_summary()
    rates = [r["tokens_per_sec"] for r in steps if r.get("tokens_per_sec")]
    return {
        "finished": bool(s), "steps": s.get("steps", steps[-1]["step"] if steps else None),
        "final_loss": steps[-1]["loss"] if steps else None,
        "eval_loss_base": s.get("eval_loss_base"), "eval_loss_adapter": s.get("eval_loss_adapter"),
        "tokens_per_sec": sum(rates) / len(rates) if rates else None,
        "predicted_peak_bytes": s.get("predicted_peak_bytes"),
        "measured_peak_bytes": s.get("measured_peak_bytes"),
        "measured_peak_kind": s.get("measured_peak_kind"), "duration_s": s.get("duration_s"),
        "curve": [[r["step"], r["loss"]] for r in steps if r.get("loss") == r.get("loss")],
    }


def across(runs: list[Path], out: Path) -> dict:
    from mens.compare.evals import eval_table
    from mens.plan.spec import SECTIONS

    names = [r.name for r in runs]
    if len(set(names)) < len(names):   # same basename on different days: add the parent
        names = [f"{r.parent.name}/{r.name}" for r in runs]
    specs = []
    for r in runs:
        raw = RunDir(r).read_spec()
        specs.append(_flat({k: raw.get(k) for k in SECTIONS if k in raw}))
    keys = sorted(set().union(*specs))
    diff = {k: [s.get(k) for s in specs] for k in keys
            if len({json.dumps(s.get(k), sort_keys=True, default=str) for s in specs}) > 1}
    result = {"mode": "across", "runs": [
        {"name": n, "dir": str(r), **lane_fields(_lane(s)), "spoke": s.get("spoke.name"),
         "rung": s.get("rung.name"), **_run_metrics(r)} for n, r, s in zip(names, runs, specs)],
        "spec_differences": diff}
    result["evals"] = eval_table(runs, names)   # eval.json / gate.json of each run, or None
    result["png"] = str(_plot(result["runs"], out / "loss_curves.png"))
    return result


def _lane(flat: dict) -> dict:
    """A run's lane from its flattened spec (an earlier mens's lane.kind too)."""
    return {k: flat.get(f"lane.{k}") for k in ("kind", "method", "objective")
            if flat.get(f"lane.{k}") is not None}


def _plot(runs: list[dict], path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")   # no display: write files only
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in runs:
        if r["curve"]:
            xs, ys = zip(*r["curve"])
            ax.plot(xs, ys, marker="." if len(xs) < 30 else None,
                    label=f"{r['name']} ({r['lane']}, {r['spoke']})")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss")
    ax.set_title("Loss curves")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _mib(b) -> str:
    return "—" if b is None else f"{b / 2**20:,.0f} MiB"


def across_md(r: dict) -> str:
    from mens.compare.evals import evals_md

    runs = r["runs"]
    head = "| | " + " | ".join(x["name"] for x in runs) + " |"
    sep = "|---" * (len(runs) + 1) + "|"
    lines = ["# Runs compared", "", "## Metrics", "", head, sep]
    rows = [("lane", lambda x: x["lane"]), ("spoke", lambda x: x["spoke"]),
            ("steps", lambda x: x["steps"]), ("final train loss", lambda x: _f(x["final_loss"])),
            ("eval loss base → tuned", lambda x: f"{_f(x['eval_loss_base'])} → "
                                                 f"{_f(x['eval_loss_adapter'])}"),
            ("tokens/s (mean)", lambda x: _f(x["tokens_per_sec"], ",.0f")),
            ("predicted peak", lambda x: _mib(x["predicted_peak_bytes"])),
            ("measured peak", lambda x: _mib(x["measured_peak_bytes"])),
            ("duration", lambda x: "—" if x["duration_s"] is None else f"{x['duration_s']:.0f} s")]
    for label, fn in rows:
        lines.append(f"| {label} | " + " | ".join(_cell(fn(x), 40) for x in runs) + " |")
    lines += ["", "## Spec differences", "", head, sep]
    for key, values in r["spec_differences"].items():
        lines.append(f"| {key} | " + " | ".join(_cell(v, 40) for v in values) + " |")
    if not r["spec_differences"]:
        lines.append("| (none) |" + " |" * len(runs))
    kinds = {x["measured_peak_kind"] for x in runs if x["measured_peak_kind"]}
    if kinds:
        lines += ["", "Measured peak: " + "; ".join(sorted(kinds)) + "."]
    lines += evals_md(r.get("evals"))
    lines += ["", f"![loss curves]({Path(r['png']).name})"]
    return "\n".join(lines) + "\n"
