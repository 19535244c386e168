"""`mens gate run=DIR`: does the run pass — judged on `mens eval`'s results, with confidence.

The gate reads the run's eval.json (mens.eval.run) and runs the evaluation it needs when that is
missing, was made for other bytes (the adapter was retrained) or asked for less than the gate
needs (fewer prompts, another k, a guard task it did not run). Then:
  - **in-domain**: the gain of `gate.metric` (auto: pass@1 when the spoke has an oracle, else
    the held-out loss) must have its whole interval above `gate.min_gain` — a gain within
    noise fails as "not significant", naming the interval. An oracle that could not run here
    fails: unverified is not passed.
  - **guards**: no collateral metric (every other spoke's loss and greedy pass rate; each
    lm-eval task or group of `gate.guard_tasks`) may lose more than `gate.max_regression` with
    confidence (its whole interval below −max_regression); nor, when the held-out records use
    tools, the spoke's own tool_call/exact and tool_call/schema_valid (mens.eval.toolcalls).
  - **a floor**: a gain on fewer than `eval.min_items` items (default 20) is "too few to judge":
    never significant, and the gate fails. 0/1 scores are judged exactly at every n (McNemar's
    test on the items that differ), other scores exactly below 20 items (a sign-flip test,
    mens.eval.stats), so a user who lowers the floor gets a verdict that holds at that n — one
    item can never pass, three flips of 0→1 neither (p = 1/8). A second floor is on the items
    that differ: an in-domain gain on fewer than 6 of them (at 95 %) is "too few to judge" at
    any n — 4 flips of 0→1 among 100 prompts never pass (p = 1/16), 6 of 6 can. A guard is
    not failed for it (items that barely differ bound the loss: its interval judges it). The
    receipt records the floor and whether it was lowered.
  - **a guard that cannot judge fails the gate**: too few items, no interval (an lm-eval metric
    that is not a mean of per-document values — perplexity, corpus F1/BLEU — has none), or
    nothing scored (its oracle could not run here). A guard that could never fail would let any
    regression through; the reason names the fix.
Gains are fractions: points of a rate (0.05 = 5 points), or the share of the base's loss
removed. Writes gate.json (atomic) with the rows it judged (each with its verdict and n), the
items, the intervals, the task versions and the eval's own spec. Exit 0 on pass, 3 on fail.
"""
from __future__ import annotations

import hashlib
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mens.data.corpus import corpus_lock
from mens.config.objectives import lane_fields
from mens.errors import EXIT_OK, EXIT_REFUSED, ConfigError
from mens.resources import CORPORA
from mens.run.receipt import artifact_sha256, write_receipt
from mens.run.rundir import RunDir
from mens.eval.stats import (confidently_below, items, significant, too_few_differ,
                             unjudgeable)
from mens.eval.toolcalls import is_guard as is_tool_guard, missing_guards as tool_guards_missing


def task(cfg: DictConfig, out_dir: Path) -> int:
    if not cfg.run:
        raise ConfigError("mens gate needs a finished run: `mens gate run=outputs/<date>/"
                          "<time>_train`.", key="run")
    receipt = gate_run(Path(cfg.run), cfg)
    print(render(receipt))
    print(f"mens: wrote {Path(cfg.run) / 'gate.json'} (verdict {receipt['verdict']})")
    return EXIT_OK if receipt["verdict"] == "pass" else EXIT_REFUSED


def eval_config(cfg: DictConfig) -> DictConfig:
    """The evaluation the gate needs: cfg.eval with the gate's prompts, k, answer length,
    collateral and guard tasks; both models; written into the run dir."""
    g, ev = cfg.gate, cfg.eval.copy()
    ev.max_prompts, ev.k, ev.max_new_tokens = g.max_prompts, g.k, g.max_new_tokens
    ev.collateral, ev.in_domain, ev.out = g.collateral, True, None
    ev.tasks = list(dict.fromkeys([*ev.tasks, *g.guard_tasks]))
    ev.models = ["base", "tuned"]
    return ev


def stale(existing: dict | None, need: DictConfig, sha: str | None) -> str | None:
    """Why an eval.json cannot serve the gate (None: it can)."""
    if existing is None:
        return "the run has no eval.json"
    if existing.get("artifact_sha256") != sha:
        return "eval.json was made for other adapter bytes (retrained or edited since)"
    have = existing.get("spec") or {}
    for key in ("max_prompts", "k", "max_new_tokens", "temperature", "confidence", "seed",
                "limit", "num_fewshot", "include_path"):
        if have.get(key) != need[key]:
            return f"eval.json has eval.{key}={have.get(key)}, the gate needs {need[key]}"
    missing = set(need.tasks) - set(have.get("tasks") or [])
    if missing:
        return f"eval.json lacks the guard task(s) {', '.join(sorted(missing))}"
    if need.collateral and not have.get("collateral"):
        return "eval.json did not measure the other spokes (eval.collateral=false)"
    if "tuned" not in (existing.get("models") or []):
        return "eval.json did not evaluate the tuned model"
    if any(r.get("group") != "judge" and "method" not in (r.get("gain") or {"method": None})
           for r in existing.get("rows") or []):
        return "eval.json predates exact intervals for few items (its gains carry no method)"
    if "tool_calls" not in existing:   # it cannot say whether the held-out records use tools
        return "eval.json predates the tool-call rows (mens eval of issue #38)"
    return None


def ensure_eval(run: Path, cfg: DictConfig, sha: str | None) -> dict:
    """The run's eval.json if it serves the gate, else a fresh `mens eval` into the run dir."""
    from mens.eval.run import evaluate, read

    need = eval_config(cfg)
    existing = read(run)
    why = stale(existing, need, sha)
    if why is None:
        print(f"mens gate: using {run / 'eval.json'}")
        return existing
    print(f"mens gate: running mens eval ({why})")
    ecfg = cfg.copy()
    ecfg.eval = need
    ecfg.run = str(run)
    evaluate(ecfg, run)
    return read(run)


def pick_metric(rows: list[dict], asked: str) -> tuple[str, str | None]:
    """(the in-domain metric gated, why auto chose it). auto: pass@1 when the spoke has an
    oracle and it separates anything — some answer of either model passes; at the floor (no
    answer of either passes) pass@1 is 0 − 0 whatever the adapter learned, so the held-out loss
    is the in-domain signal, and the receipt says so."""
    if asked != "auto":
        return asked, None
    p1 = next((r for r in rows if r["group"] == "in_domain" and r["metric"] == "pass@1"), None)
    if p1 is None:
        return "loss", "auto: the spoke has no oracle (or eval.k=0): gated on the held-out loss"
    if p1.get("base", {}).get("value") == 0 and p1.get("tuned", {}).get("value") == 0:
        return "loss", (f"auto: pass@1 is at its floor — no answer of either model passes "
                        f"`{p1.get('check')}` over {p1['n']} prompts — so it cannot show a gain; "
                        f"gated on the held-out loss")
    return "pass@1", None


def judge(result: dict, g, min_items: int) -> tuple:
    """(verdict, reasons, the in-domain row, the guard rows, the metric gated, why auto chose
    it). The rows returned are copies carrying their verdict in words ("verdict"), n included;
    min_items: eval.min_items, the floor below which nothing is judged."""
    rows = result["rows"]
    conf = (result.get("spec") or {}).get("confidence", 0.95)
    metric, why_metric = pick_metric(rows, g.metric)
    if why_metric:
        print(f"mens gate: {why_metric}")
    if metric == "pass@k":
        metric = f"pass@{(result.get('spec') or {}).get('k')}"
    reasons = []
    own = next((r for r in rows if r["group"] == "in_domain" and r["metric"] == metric), None)
    if own is not None:
        own = {**own, "verdict": _own_verdict(own, g, min_items, conf, reasons, metric)}
    else:
        reasons.append(f"in-domain: no `{metric}` result (gate.metric={g.metric}); the spoke "
                       f"has no oracle or eval.k is 0 — use gate.metric=loss")
    guards = [{**r, "verdict": _guard_verdict(r, g, min_items, conf, reasons)}
              for r in rows if r["group"] == "collateral" or is_tool_guard(r)
              or (r["group"] == "benchmark" and r.get("task") in set(g.guard_tasks))]
    missing = set(g.guard_tasks) - {r.get("task") for r in guards}
    reasons += [f"guard task {t}: no result in eval.json" for t in sorted(missing)]
    reasons += tool_guards_missing(result)
    return ("fail" if reasons else "pass"), reasons, own, guards, metric, why_metric


FEWER = ("score more items (gate.max_prompts, more held-out data; an lm-eval task's eval.limit) "
         "or lower eval.min_items, which gate.json records")


def _own_verdict(own: dict, g, min_items: int, conf: float, reasons: list, metric: str) -> str:
    """The in-domain row's verdict; a failing one appends its reason."""
    gain, n = own.get("gain") or {}, items(own.get("gain"), own.get("n"))
    head = f"in-domain {own['spoke']} {metric}"
    if gain.get("value") is None:
        unv = own.get("unverified") or {}
        why = (f"{unv.get('base', 0) + unv.get('tuned', 0)} answers unverified "
               f"({'; '.join(unv.get('reasons') or []) or 'no reason given'})"
               if unv.get("prompts_left_out") else "no item scored")
        reasons.append(f"{head}: {why} — the oracle `{own.get('check')}` could not judge here; "
                       f"unverified is not passed")
        return f"cannot judge: {why} (n={n})"
    why = unjudgeable(gain, n, min_items)
    p = f" (exact one-sided p of no gain: {gain['p']:.3g})" if gain.get("p") is not None else ""
    if why:
        reasons.append(f"{head}: gain {_pts(gain['value'])}, {why}{p} — the gate calls no gain "
                       f"significant without an interval on at least eval.min_items items; "
                       f"{FEWER}")
        return why
    why = too_few_differ(gain, n, conf)
    if why:
        reasons.append(f"{head}: gain {_pts(gain['value'])}, {why}{p} — however many items "
                       f"agree, only those that differ can show a gain; score more items "
                       f"(gate.max_prompts, more held-out data)")
        return why
    if significant(gain, g.min_gain, n, min_items):
        return f"significant (n={n})"
    lo, hi = gain["ci"]
    what = "a confident loss" if hi < 0 else "not significant"
    reasons.append(f"{head}: gain {_pts(gain['value'])} is {what}: its {conf:.0%} interval "
                   f"[{_pts(lo)}, {_pts(hi)}] over {n} prompts does not lie above "
                   f"gate.min_gain={g.min_gain:g}")
    return f"{what} (n={n})"


def _guard_verdict(r: dict, g, min_items: int, conf: float, reasons: list) -> str:
    """A guard row's verdict; one that fails — or cannot judge — appends its reason."""
    gain, n = r.get("gain") or {}, items(r.get("gain"), r.get("n"))
    head = f"{r['group']} {r['name']}"
    if gain.get("value") is None:
        unv = r.get("unverified") or {}
        what = ("its oracle could not run here: "
                f"{'; '.join(unv.get('reasons') or []) or 'no reason given'}"
                if unv.get("prompts_left_out") else "no item scored")
        reasons.append(f"{head}: cannot judge: nothing scored (n={n}; {what}) — a guard that "
                       f"cannot judge fails the gate; make it scorable or drop it "
                       f"(gate.collateral=false, gate.guard_tasks)")
        return f"cannot judge (n={n})"
    why = unjudgeable(gain, n, min_items)
    if why:
        fix = FEWER if why.startswith("too few") or gain.get("method") else (
            "lm-eval gives this metric no per-document values to resample; guard a task whose "
            "metric is a mean over its documents, or drop it from gate.guard_tasks")
        reasons.append(f"{head}: {why} — a guard that cannot judge fails the gate; {fix}")
        return why
    if confidently_below(gain, -g.max_regression, n, min_items):
        lo, hi = gain["ci"]
        reasons.append(f"{head}: loses {_pts(-gain['value'])} ({conf:.0%} interval of the gain "
                       f"[{_pts(lo)}, {_pts(hi)}] over {n} items) — more than "
                       f"gate.max_regression={g.max_regression:g} with confidence")
        return f"a confident loss (n={n})"
    return f"no confident loss (n={n})"


def _pts(x: float) -> str:
    return f"{x:+.3f}"


def gate_run(run: Path | str, cfg: DictConfig, corpora: Path | str = CORPORA) -> dict:
    """Evaluate (when needed), judge and write `<run>/gate.json` (atomic); returns the receipt."""
    from mens.config.options import spokes

    run = Path(run)
    rd = RunDir(run)
    if not rd.spec.is_file() or not rd.finished:
        raise ConfigError(f"run={run}: not a finished training run (spec.yaml and summary.json); "
                          f"gate a run dir that `mens train` completed.", key="run")
    sha = artifact_sha256(run)
    if sha is None:
        raise ConfigError(f"run={run}: neither adapter/ nor model/ there; nothing to gate.",
                          key="run")
    started = time.time()
    result = ensure_eval(run, cfg, sha)
    floor = _floor(cfg)
    verdict, reasons, own, guards, metric, why_metric = judge(result, cfg.gate, floor["min_items"])
    spec = OmegaConf.load(rd.spec)
    raw = (run / "eval.json").read_bytes()
    receipt = {
        "run": str(run), "rung": spec.rung.name, "rung_commit": spec.rung.commit,
        "spoke": result["spoke"], **lane_fields(spec.lane), "artifact_sha256": sha,
        "verdict": verdict, "reasons": reasons,
        "thresholds": OmegaConf.to_container(cfg.gate, resolve=True),
        "floor": floor,
        "metric": metric, "metric_why": why_metric, "in_domain": own, "guards": guards,
        "eval": {"path": "eval.json", "sha256": hashlib.sha256(raw).hexdigest(),
                 "spec": result.get("spec"), "created": result.get("created"),
                 "task_versions": {r["task"]: r.get("version") for r in result["rows"]
                                   if r["group"] == "benchmark"},
                 "items": {r["name"]: r["n"] for r in result["rows"]}},
        "corpus_lock": {s: corpus_lock(s, corpora) for s in spokes()},
        "created": time.time(), "duration_s": round(time.time() - started, 2)}
    write_receipt(run, receipt)
    return receipt


def _floor(cfg) -> dict:
    """eval.min_items as the gate applies it; lowered below the schema's default, it is said
    and recorded (a verdict on fewer items is the user's choice, not mens's)."""
    from mens.config.schema import EvalConfig

    k, default = int(cfg.eval.min_items), EvalConfig.min_items
    if k < default:
        print(f"mens gate: note: eval.min_items={k} (default {default}): gains on {k} to "
              f"{default - 1} items are judged (exact intervals); gate.json records the floor")
    return {"min_items": k, "default": default, "lowered": k < default}


def render(receipt: dict) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    from mens.run.evalrow import MetricRow

    buf = StringIO()
    con = Console(file=buf, width=120, force_terminal=False, color_system=None)
    t = Table(title=f"gate · {receipt['rung']} · {receipt['spoke']} · {receipt['lane']} · "
                    f"gated on {receipt['metric']}", show_edge=False)
    for c in ("role", "metric", "n", "base", "tuned", "gain", "verdict"):
        t.add_column(c, justify="left" if c in ("role", "metric", "verdict") else "right")
    for role, r in [("in-domain", receipt["in_domain"]),
                    *(("guard", r) for r in receipt["guards"])]:
        if r is None:
            continue
        row = MetricRow.of(r)
        t.add_row(role, r["name"], str(r["n"]), row.text("base"), row.text("tuned"),
                  row.text("gain"), r.get("verdict") or "")
    con.print(t)
    floor = receipt.get("floor") or {}
    lowered = (f" (lowered from {floor['default']})" if floor.get("lowered") else "")
    con.print(f"verdict: {receipt['verdict'].upper()} · eval.min_items="
              f"{floor.get('min_items')}{lowered}")
    for why in receipt["reasons"]:
        con.print(f"  - {why}")
    return buf.getvalue().rstrip()
