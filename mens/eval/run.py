"""`mens eval run=DIR` / `mens eval +rung=… ` (a base alone): the evaluation stage.

One pass, both models on the same items: standard benchmarks (lm-eval, `eval.tasks`), the
spoke's held-out prompts scored by its oracle (loss, greedy, pass@1, pass@k), every other spoke's
held-out prompts for collateral damage (loss, greedy pass rate), and with `eval.judge=teacher`
a pairwise judge. Every number is a metric row with its interval (mens/eval/__init__.py).
Writes eval.json + eval.md (atomic) into the run dir — or `eval.out`, or this command's own dir
for a base — appends a record to eval.jsonl there, and logs a wandb run of job_type eval.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mens.errors import EXIT_OK, ConfigError
from mens.config.objectives import lane_fields
from mens.run.rundir import RunDir, atomic_write

EVAL_JSON, EVAL_MD, EVAL_LOG = "eval.json", "eval.md", "eval.jsonl"


def task(cfg: DictConfig, out_dir: Path) -> int:
    from mens.eval.report import render_md

    result = evaluate(cfg, Path(out_dir))
    print(render_md(result))
    print(f"mens: wrote {Path(result['dir']) / EVAL_JSON} and {EVAL_MD}")
    return EXIT_OK


def target(cfg: DictConfig, out_dir: Path) -> tuple[Path | None, DictConfig, Path]:
    """(run dir or None, the spec evaluated, where results go). A run: its spec.yaml; a base
    alone: the composed config compiled (torch-free) as `mens plan` would; with `adapter=`
    (a Hub repo or a dir) that base and the adapter, fetched and pinned as training would."""
    if cfg.run and cfg.adapter:
        raise ConfigError(f"run={cfg.run} and adapter={cfg.adapter}: evaluate one, the run's own "
                          f"adapter (run=) or another over a base (`+rung=… adapter=…`).",
                          key="adapter")
    if cfg.run:
        run = Path(cfg.run)
        rd = RunDir(run)
        if not rd.spec.is_file() or not rd.finished or rd.artifact is None:
            raise ConfigError(f"run={run}: not a finished training run (spec.yaml, summary.json "
                              f"and adapter/ or model/); evaluate a run dir that `mens train` "
                              f"completed, or a base alone with `+rung=NAME` and no run=.",
                              key="run")
        return run, OmegaConf.load(rd.spec), Path(cfg.eval.out) if cfg.eval.out else run
    from mens.plan.spec import compile_run
    spec, _ = compile_run(cfg, "plan")
    return None, OmegaConf.create(spec.config_dict()), \
        Path(cfg.eval.out) if cfg.eval.out else out_dir


def held_out_sets(spec, max_prompts: int, collateral: bool,
                  notes: list[str] | None = None) -> list[tuple[str, str, str | None, list]]:
    """[(role, spoke, admission check, chat records)]: the data's own held-out split first
    (no oracle for a user's own data), then every other spoke's eval set. Pairs and labeled
    records are scored as chats (mens.eval.indomain.as_chats: the chosen or desirable answer);
    what is left out is said and added to `notes`."""
    import sys

    from mens.config.options import load_option, spokes
    from mens.data.corpus import load_eval
    from mens.data.select import eval_records, user_data
    from mens.eval.indomain import as_chats

    def chats(name: str, recs: list[dict]) -> list[dict]:
        kept, left = as_chats(recs)
        if any(left.values()):
            line = (f"{name}: {left['undesirable']} undesirable labeled and {left['text']} text "
                    f"held-out record(s) not scored (no answer the data calls good)")
            print(f"mens eval: note: {line}", file=sys.stderr)
            (notes if notes is not None else []).append(line)
        return kept[:max_prompts]

    own_name, own = eval_records(spec)["eval"]
    own_check = None if user_data(spec) else spec.spoke.admission.check
    out = [("in_domain", own_name, own_check, chats(own_name, own))]
    for name in spokes() if collateral else []:
        if name == own_name:
            continue
        sp = load_option("spoke", name)
        out.append(("collateral", name, sp.admission.check, chats(name, load_eval(sp))))
    return out


def _plans(cfg, spec) -> dict:
    """Eval batch sizes under the memory contract, on this machine's budget."""
    from mens.plan.evaluate import plan_eval
    from mens.plan.hardware import resolve_hw
    from mens.plan.memory import Arch, load_contract
    from mens.plan.lane import lane_model

    notes: list[str] = []
    hw = cfg.hw.copy()
    _, budget_gb = resolve_hw(hw, "eval", notes)
    contract = load_contract(cfg.plan.contract)
    precision = "fp32" if hw.backend == "cpu" else ("bf16" if hw.bf16 else "fp16")
    lane = lane_model(spec.lane, precision)
    arch = Arch.of(spec.rung)
    asked = None if cfg.eval.batch_size == "auto" else int(cfg.eval.batch_size)
    ctx = min(int(spec.rung.max_position_embeddings), int(cfg.eval.max_length or 4096))
    out = {}
    for mode, s in (("loglik", ctx), ("generate", min(ctx, 1024 + cfg.eval.max_new_tokens))):
        p = plan_eval(arch, lane, hw.backend, contract, int(budget_gb * 2**30), s, mode, asked)
        if not p.fits:
            from mens.errors import PlanRefused
            raise PlanRefused(f"eval plan: {p.line()} does not fit; lower eval.max_length / "
                          f"eval.max_new_tokens, or evaluate on a larger device.")
        out[mode] = p
    return {"plans": out, "notes": notes, "backend": hw.backend}


def evaluate(cfg: DictConfig, out_dir: Path) -> dict:
    """Run every part `cfg.eval` asks for; write eval.json / eval.md / eval.jsonl; return it."""
    from mens.eval import indomain, toolcalls

    ev = cfg.eval
    started = time.time()
    run, spec, dest = target(cfg, out_dir)
    planned = _plans(cfg, spec)
    gen_batch = planned["plans"]["generate"].batch
    ll_batch = planned["plans"]["loglik"].batch
    for p in planned["plans"].values():
        print(f"mens: eval plan: {p.line()}")
    # adapter=: the fetched adapter (spec.adapter pinned, train.init_adapter its local dir)
    adapter = spec.train.init_adapter if run is None and spec.get("adapter") else None
    models = [m for m in ev.models if run is not None or adapter or m == "base"]
    if ev.tasks:   # unknown names, uncached data, a metric with no direction: now, before weights
        from mens.eval.harness import check_directions
        from mens.eval.tasks import load_tasks
        check_directions(load_tasks(list(ev.tasks), ev.include_path)[1])
    from mens.source.resolve import fetch_base
    fetch_base(spec.rung)      # a Hub base not cached here: downloaded now the eval plan fits
    slots, base, tuned = _load(run, spec, adapter)
    rows, items, judged, tool_stats = [], {}, None, None
    try:
        if ev.tasks:
            rows += _benchmarks(slots, base, tuned, ev, spec, ll_batch, models)
        sets = held_out_sets(spec, int(ev.max_prompts), bool(ev.collateral), planned["notes"]) \
            if ev.in_domain or ev.collateral else []
        for role, name, check, recs in sets:
            if role == "in_domain" and not ev.in_domain:
                continue
            # a base alone is scored as its own pair (the tuned side is dropped below)
            scored = indomain.score_set(
                slots, base, tuned if tuned is not None and "tuned" in models else base, recs,
                check, spec, ev, role="spoke" if role == "in_domain" else "collateral",
                spoke=name, batch_size=gen_batch,
                k=int(ev.k) if role == "in_domain" else 0, greedy=True)
            for r in scored["rows"]:
                r["check"] = check
            rows += scored["rows"]
            items[f"{role}/{name}"] = scored["items"]
            if role == "in_domain" and toolcalls.uses_tools(recs):   # issue #38: tool-call rows
                tc = toolcalls.score_set(
                    slots, base, tuned if tuned is not None and "tuned" in models else None, recs,
                    spec, ev, spoke=name, batch_size=gen_batch)
                rows += tc["rows"]
                items[f"tool_calls/{name}"] = tc["items"]
                tool_stats = {"spoke": name, **tc["stats"]}
        if "tuned" not in models:
            rows = [{k: v for k, v in r.items() if k not in ("tuned", "delta", "gain")}
                    for r in rows]
            items = {k: [{f: v for f, v in it.items() if f != "tuned"} for it in its]
                     for k, its in items.items()}
        if ev.judge == "teacher" and tuned is not None and "tuned" in models:
            judged = _judge(cfg, items, sets, (slots, base, tuned), gen_batch)
            rows += judged["rows"]
    finally:
        slots.close()
    from mens.run.receipt import artifact_sha256
    result = {
        "kind": "mens.eval", "version": 1, "run": str(run) if run else None,
        "adapter": spec.adapter if adapter else None,
        "dir": str(dest), "rung": spec.rung.name, "spoke": spec.spoke.name,
        **lane_fields(spec.lane), "artifact_sha256": artifact_sha256(run) if run else None,
        "models": models, "spec": OmegaConf.to_container(ev, resolve=True),
        "plan": {m: p.to_dict() for m, p in planned["plans"].items()},
        "notes": planned["notes"] + list(slots.notes), "rows": rows,
        "judge": {k: v for k, v in judged.items() if k != "rows"} if judged else None,
        "tool_calls": tool_stats,      # the in-domain set's tool-call turns (None: it uses none)
        "created": time.time(), "duration_s": round(time.time() - started, 2)}
    write(dest, result, items)
    _log_wandb(cfg, run, dest, result)
    return result


def _load(run: Path | None, spec, adapter: str | None = None):
    """(slots, base slot, tuned slot or None): one PeftModel for an adapter run, or for the
    base and `adapter=` (its local dir)."""
    if run is not None:
        from mens.compare.core import load_models
        (slots, base), (other, tuned) = load_models(run, spec)
        if other is not slots:
            raise ConfigError(f"run={run}: a full fine-tune (model/) is evaluated against its "
                              f"base by `mens compare`; `mens eval` pairs a base with its "
                              f"adapter on one model (evaluate model/ alone with "
                              f"rung.path=… and no run=).", key="run")
        return slots, base, tuned
    from mens.serve.slots import BASE, Slots, Source
    sources = [Source("tuned", Path(adapter), None)] if adapter else []
    slots = Slots(OmegaConf.to_container(spec.rung), sources, seed=int(spec.train.seed))
    return slots, slots.slots[BASE], slots.slots["tuned"] if adapter else None


def _benchmarks(slots, base, tuned, ev, spec, batch: int, models: list[str]) -> list[dict]:
    from mens.eval.harness import benchmark_rows, run_tasks

    ctx = min(int(spec.rung.max_position_embeddings), int(ev.max_length or 4096))
    chat = None if ev.chat_template == "auto" else bool(ev.chat_template)
    res = {}
    for label, slot in (("base", base), ("tuned", tuned)):
        if slot is None or label not in models:
            continue
        with slots.activate(slot):
            res[label] = run_tasks(slots.model, slots.tokenizer, ev, label=label,
                                   batch_size=batch, max_length=ctx, chat_template=chat)
    return benchmark_rows(res.get("base"), res.get("tuned"), ev)


def _judge(cfg, items: dict, sets, models, batch: int) -> dict:
    """The judge on the in-domain prompts' greedy answers (generated here when the set had no
    oracle, so none were made)."""
    from mens.eval.indomain import generate
    from mens.eval.judge import judge
    from mens.synth.teacher import Teacher

    key = next((k for k in items if k.startswith("in_domain/")), None)
    if key is None:
        raise ConfigError("eval.judge=teacher compares answers to the spoke's held-out prompts: "
                          "turn eval.in_domain back on.", key="eval.judge")
    recs = next(r for role, _, _, r in sets if role == "in_domain")
    chosen = items[key][:int(cfg.eval.judge_prompts)]
    prompts = [_prompt(r["messages"]) for r in recs[:len(chosen)]]
    slots, base, tuned = models
    answers = {}
    for label, slot in (("base", base), ("tuned", tuned)):
        if all("greedy" in it.get(label, {}) for it in chosen):
            answers[label] = [it[label]["greedy"]["text"] for it in chosen]
        else:
            ids = [slots.encode_chat(p) for p in prompts]
            answers[label] = [a[0] for a in generate(
                slots, slot, ids, n=1, temperature=0.0, top_p=1.0,
                max_new=cfg.eval.max_new_tokens, seed=cfg.eval.seed, batch_size=batch)]
    return judge(Teacher.from_config(cfg.teacher), prompts, answers["base"], answers["tuned"],
                 cfg.eval)


def _prompt(msgs: list[dict]) -> list[dict]:
    last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
    return msgs[:last_user + 1]


def write(dest: Path, result: dict, items: dict) -> None:
    """eval.json (with every item's verdicts), eval.md, one record appended to eval.jsonl."""
    from mens.eval.report import render_md

    dest.mkdir(parents=True, exist_ok=True)
    atomic_write(dest / EVAL_JSON, json.dumps({**result, "items": items}, indent=1))
    atomic_write(dest / EVAL_MD, render_md(result))
    record = {"event": "EVAL_RESULT", "time": result["created"], "run": result["run"],
              "artifact_sha256": result["artifact_sha256"], "models": result["models"],
              "duration_s": result["duration_s"],
              "metrics": {r["name"]: {k: (r.get(k) or {}).get("value")
                                      for k in ("base", "tuned", "gain")} for r in result["rows"]}}
    with open(dest / EVAL_LOG, "a") as f:   # append-only: one line per evaluation
        f.write(json.dumps(record) + "\n")


def read(run: Path | str) -> dict | None:
    """A run dir's eval.json, or None when it was never evaluated (one reader: a file that is
    not a mens eval.json is a ConfigError naming it — mens.compare.evals.read_eval)."""
    from mens.compare.evals import read_eval
    return read_eval(run)


def _log_wandb(cfg, run: Path | None, dest: Path, result: dict) -> None:
    """A wandb run of job_type eval: each metric's values and interval ends in its summary, the
    rows as a table (offline unless $WANDB_MODE, as training's)."""
    if cfg.logger.kind != "wandb":
        return
    import os

    import wandb

    from mens.config.schema import DEFAULT_WANDB_PROJECT
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    project = cfg.logger.project or os.environ.get("WANDB_PROJECT") or DEFAULT_WANDB_PROJECT
    w = wandb.init(project=project, entity=cfg.logger.entity, dir=str(dest), job_type="eval",
                   name=f"eval-{Path(run).name if run else result['rung']}",
                   mode=os.environ["WANDB_MODE"], reinit="create_new",
                   config={"run": result["run"], "eval": result["spec"]})
    try:
        cols = ["name", "group", "n", "base", "base_lo", "base_hi", "tuned", "tuned_lo",
                "tuned_hi", "gain", "gain_lo", "gain_hi"]
        data = []
        for r in result["rows"]:
            cells = []
            for k in ("base", "tuned", "gain"):
                v = r.get(k) or {}
                ci = v.get("ci") or [None, None]
                cells += [v.get("value"), ci[0], ci[1]]
            data.append([r["name"], r["group"], r["n"], *cells])
            w.summary.update({f"eval/{r['name']}/{c}": x for c, x in zip(cols[3:], cells)
                              if x is not None})
        w.log({"eval/rows": wandb.Table(columns=cols, data=data)})
    finally:
        w.finish()
