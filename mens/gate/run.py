"""`mens gate run=DIR`: does the run pass — judged on `mens eval`'s results, with confidence.

The gate reads the run's eval.json (mens.eval.run) and runs the evaluation it needs when that is
missing, was made for other bytes (the adapter was retrained) or asked for less than the gate
needs (fewer prompts, another k, a guard task it did not run). Then:
  - **in-domain**: the gain of `gate.metric` (auto: pass@1 when the spoke has an oracle, else
    the held-out loss) must have its whole interval above `gate.min_gain` — a gain within
    noise fails as "not significant", naming the interval. An oracle that could not run here
    fails: unverified is not passed.
  - **guards**: no collateral metric (every other spoke's loss and greedy pass rate; each
    lm-eval task of `gate.guard_tasks`) may lose more than `gate.max_regression` with
    confidence (its whole interval below −max_regression); nor, when the held-out records use
    tools, the spoke's own tool_call/exact and tool_call/schema_valid (mens.eval.toolcalls).
Gains are fractions: points of a rate (0.05 = 5 points), or the share of the base's loss
removed. Writes gate.json (atomic) with the rows it judged, the items, the intervals, the task
versions and the eval's own spec. Exit 0 on pass, 3 on fail (the gate refuses).
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
from mens.eval.stats import confidently_below, significant
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


def judge(result: dict, g) -> tuple[str, list[str], dict | None, list[dict], str]:
    """(verdict, reasons, the in-domain row, the guard rows, the metric gated)."""
    rows = result["rows"]
    conf = (result.get("spec") or {}).get("confidence", 0.95)
    metric, why_metric = pick_metric(rows, g.metric)
    if why_metric:
        print(f"mens gate: {why_metric}")
    if metric == "pass@k":
        metric = f"pass@{(result.get('spec') or {}).get('k')}"
    reasons = []
    own = next((r for r in rows if r["group"] == "in_domain" and r["metric"] == metric), None)
    if own is None:
        reasons.append(f"in-domain: no `{metric}` result (gate.metric={g.metric}); the spoke "
                       f"has no oracle or eval.k is 0 — use gate.metric=loss")
    elif (own.get("gain") or {}).get("value") is None:
        unv = own.get("unverified") or {}
        why = (f"{unv.get('base', 0) + unv.get('tuned', 0)} answers unverified "
               f"({'; '.join(unv.get('reasons') or []) or 'no reason given'})"
               if unv.get("prompts_left_out") else "no item scored")
        reasons.append(f"in-domain {own['spoke']} {metric}: {why} — the oracle "
                       f"`{own.get('check')}` could not judge here; unverified is not passed")
    elif not significant(own["gain"], g.min_gain):
        lo, hi = own["gain"]["ci"]
        what = "a confident loss" if hi < 0 else "not significant"
        reasons.append(f"in-domain {own['spoke']} {metric}: gain {_pts(own['gain']['value'])} is "
                       f"{what}: its {conf:.0%} interval [{_pts(lo)}, {_pts(hi)}] over "
                       f"{own['n']} prompts does not lie above gate.min_gain={g.min_gain:g}")
    guards = [r for r in rows if r["group"] == "collateral" or is_tool_guard(r)
              or (r["group"] == "benchmark" and r.get("task") in set(g.guard_tasks))]
    for r in guards:
        gain = r.get("gain") or {}
        if confidently_below(gain, -g.max_regression):
            lo, hi = gain["ci"]
            reasons.append(f"{r['group']} {r['name']}: loses {_pts(-gain['value'])} "
                           f"({conf:.0%} interval of the gain [{_pts(lo)}, {_pts(hi)}]) — more "
                           f"than gate.max_regression={g.max_regression:g} with confidence")
    missing = set(g.guard_tasks) - {r.get("task") for r in guards}
    reasons += [f"guard task {t}: no result in eval.json" for t in sorted(missing)]
    reasons += tool_guards_missing(result)
    return ("fail" if reasons else "pass"), reasons, own, guards, metric, why_metric


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
    verdict, reasons, own, guards, metric, why_metric = judge(result, cfg.gate)
    spec = OmegaConf.load(rd.spec)
    raw = (run / "eval.json").read_bytes()
    receipt = {
        "run": str(run), "rung": spec.rung.name, "rung_commit": spec.rung.commit,
        "spoke": result["spoke"], **lane_fields(spec.lane), "artifact_sha256": sha,
        "verdict": verdict, "reasons": reasons,
        "thresholds": OmegaConf.to_container(cfg.gate, resolve=True),
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


def render(receipt: dict) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    from mens.eval.report import fmt_gain, fmt_value, is_rate

    buf = StringIO()
    con = Console(file=buf, width=120, force_terminal=False, color_system=None)
    t = Table(title=f"gate · {receipt['rung']} · {receipt['spoke']} · {receipt['lane']} · "
                    f"gated on {receipt['metric']}", show_edge=False)
    for c in ("role", "metric", "n", "base", "tuned", "gain"):
        t.add_column(c, justify="left" if c in ("role", "metric") else "right")
    for role, r in [("in-domain", receipt["in_domain"]),
                    *(("guard", r) for r in receipt["guards"])]:
        if r is None:
            continue
        pct = is_rate(r)
        t.add_row(role, r["name"], str(r["n"]), fmt_value(r.get("base"), pct),
                  fmt_value(r.get("tuned"), pct), fmt_gain(r))
    con.print(t)
    con.print(f"verdict: {receipt['verdict'].upper()}")
    for why in receipt["reasons"]:
        con.print(f"  - {why}")
    return buf.getvalue().rstrip()
