"""One queue item, step by step: base → data → train → gate → promote.

Each step records what it did in item["steps"][step] and every child's exit in
item["exit_codes"]; the queue saves the item after each step, so a crash at any point leaves
a queue.json that says how far the item got. A step that is already done is not done again:
a finished run dir (summary.json) is not retrained, an interrupted one resumes from its
checkpoint (`python -m mens resume=<run dir>`), and a run dir without a checkpoint is moved
aside and trained afresh.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from mens.afk import cells
from mens.afk.child import last_error, python_m, run_child
from mens.errors import EXIT_INTERRUPTED, EXIT_OK, MensError
from mens.run.receipt import RECEIPT
from mens.run.rundir import RunDir

GiB = 1024 ** 3


class Stop(Exception):
    """The item stops here: state and reason are set on the item (failed or paused)."""


def fail(item: dict, reason: str, step: str, code: int | None = None) -> Stop:
    item.update(state="failed", reason=f"{step}: {reason}")
    if code is not None:
        item["exit_codes"].append({"step": step, "code": code})
    return Stop(reason)


def base(item: dict, afk) -> object:
    """Compile the cell for training (weights located, or scheduled for download when
    rung.download allows and the hub is reachable), then fetch them. Returns the spec."""
    from mens.source.resolve import ensure_weights
    from mens.plan.spec import compile_run

    try:
        spec, plan = compile_run(cells.compose_cell(item["rung"], item["spoke"],
                                                    afk.overrides), "train")
        if not plan.fits:
            raise fail(item, f"the plan does not fit this machine any more "
                             f"({plan.peak_bytes / GiB:.2f} GiB predicted, "
                             f"{plan.budget_bytes / GiB:.2f} GiB budget)", "base", 3)
        spec = ensure_weights(spec)
    except MensError as e:
        raise fail(item, e.message, "base", e.code) from None
    rung = spec.rung
    item["steps"]["base"] = {
        "rung": rung.name, "source": "bundled" if rung.tokenizer_bundled else
        (rung.path or rung.repo_id), "commit": rung.commit, "backend": spec.hw.backend}
    item["predicted_peak_bytes"] = plan.peak_bytes
    return spec


def data(item: dict, spec) -> None:
    """The cell's data, read and checked before a child spends minutes on it; the spoke
    corpus's content digest is recorded (the ladder compares it to call a run STALE). A stale
    cell is trained afresh on the corpus as it is now: the shipped corpora have no generator at
    run time (tools/make_corpus.py builds them in a checkout), so nothing else is refreshed."""
    from mens.data.select import train_records

    try:
        records, stats, label = train_records(spec)
    except MensError as e:
        raise fail(item, e.message, "data", e.code) from None
    out = {"data": label, "records": len(records)}
    try:
        from mens.data.corpus import corpus_lock
        out["corpus_lock"] = corpus_lock(spec.spoke.name)
    except ImportError:
        pass
    item["steps"]["data"] = out


def memory_limit(item: dict, afk, backend: str) -> int | None:
    """planned peak × afk.memory_factor + afk.memory_overhead_gb, on CPU and MPS, where the
    plan is of the memory RSS measures; on CUDA the plan is device memory, and host RSS (a
    large base streams through it while loading) is not limited."""
    peak = item.get("predicted_peak_bytes")
    if afk.memory_factor is None or not peak or backend not in ("cpu", "mps"):
        return None
    return int(peak * afk.memory_factor + afk.memory_overhead_gb * GiB)


def train(item: dict, afk, spec, stop, log: Path, save) -> None:
    run = RunDir(item["run_dir"])
    if run.finished:
        item["steps"]["train"] = {"mode": "finished", "summary": str(run.summary)}
        return
    if run.last_checkpoint.is_file():
        mode, argv = "resume", python_m("mens", f"resume={run.path}")
    else:
        if run.path.exists():   # started, never checkpointed: keep it aside, start again
            aside = run.path.with_name(f"{run.path.name}.attempt{item['attempts'] - 1}")
            os.replace(run.path, aside)
            print(f"mens: note: afk: {run.path} has no checkpoint to resume from; moved to "
                  f"{aside}, training afresh", file=sys.stderr)
        mode = "fresh"
        argv = python_m("mens", *cells.overrides(item["rung"], item["spoke"], afk.overrides),
                        f"hydra.run.dir={run.path}")
    limit = memory_limit(item, afk, spec.hw.backend)
    item["memory_limit_bytes"] = limit
    item["steps"]["train"] = {"mode": mode, "pid": None}

    def started(pid: int) -> None:
        item["steps"]["train"]["pid"] = pid
        save()
    out = run_child(argv, log, afk.nice, limit, afk.poll_s, stop, started)
    item["exit_codes"].append({"step": "train", "code": out.code, "mode": mode})
    item["steps"]["train"].update(code=out.code, peak_rss_bytes=out.peak_rss_bytes)
    if out.stopped == "memory":
        raise fail(item, f"stopped: its RSS passed the limit of {limit / GiB:.2f} GiB (planned "
                         f"peak {item['predicted_peak_bytes'] / GiB:.2f} GiB × "
                         f"afk.memory_factor={afk.memory_factor} + afk.memory_overhead_gb="
                         f"{afk.memory_overhead_gb}); log {log}", "train")
    if out.code == EXIT_INTERRUPTED or out.stopped == "interrupt":
        where = "from its checkpoint" if run.last_checkpoint.is_file() else "afresh"
        item.update(state="paused", reason=f"train: interrupted (exit {out.code}); `mens afk` "
                                           f"resumes it {where}")
        raise Stop("interrupted")
    if out.code != EXIT_OK or not run.finished:
        raise fail(item, f"exit {out.code}: {last_error(log) or 'no summary.json'} (log {log})",
                   "train")


def gate(item: dict, afk, cfg, stop, log: Path, limit: int | None) -> bool | None:
    """mens gate on the run (a child: it loads the model). True / False: its receipt passes or
    not (exit 3, a refusal, is a verdict, not a failure of the item); None: not gated (the
    gate package absent here, or afk.gate=false — said, and recorded). A receipt that already
    passes for these exact weights (a crash after gating) is not measured again."""
    import importlib.util

    if not afk.gate:
        item["steps"]["gate"] = {"skipped": "afk.gate=false"}
        return None
    if importlib.util.find_spec("mens.gate") is None:
        print("mens: note: afk: mens.gate is not installed here; the run is not gated",
              file=sys.stderr)
        item["steps"]["gate"] = {"skipped": "mens.gate is not installed"}
        return None
    from mens.run.receipt import receipt_status

    run = item["run_dir"]
    status, why = receipt_status(run)
    if status != "pass":
        settings = [f"gate.{k}={v}" for k, v in cfg.gate.items()]
        out = run_child(python_m("mens.gate", f"run={run}", *settings), log, afk.nice, limit,
                        afk.poll_s, stop)
        item["exit_codes"].append({"step": "gate", "code": out.code})
        if out.stopped == "interrupt" or out.code == EXIT_INTERRUPTED:
            item.update(state="paused", reason="gate: interrupted; `mens afk` gates it again")
            raise Stop("interrupted")
        status, why = receipt_status(run)
        if status == "none":
            raise fail(item, f"exit {out.code}: no gate.json ({last_error(log)}; log {log})",
                       "gate")
    item["steps"]["gate"] = {"status": status, "passed": status == "pass", "why": why,
                             "receipt": str(Path(run) / RECEIPT)}
    return status == "pass"


def promote(item: dict, afk, cfg, passed: bool | None, log: Path) -> None:
    """The run's adapter becomes its spoke's champion on the running server (its slot is the
    run dir's name). A refusal is recorded, not fatal: the run is trained and gated either way."""
    if not afk.promote:
        return
    if not passed:
        why = "its gate did not pass" if passed is False else "it was not gated"
        item["steps"]["promote"] = {"skipped": why}
        return
    s = cfg.serve
    args = ["promote", item["spoke"], Path(item["run_dir"]).name, f"serve.host={s.host}",
            f"serve.port={s.port}"]
    key_env = s.get("api_key_env")
    if key_env:
        args.append(f"serve.api_key_env={key_env}")
    out = run_child(python_m("mens.serve", *args), log, 0, None, afk.poll_s, lambda: False)
    item["exit_codes"].append({"step": "promote", "code": out.code})
    item["steps"]["promote"] = {"code": out.code, "promoted": out.code == EXIT_OK,
                                **({} if out.code == EXIT_OK else {"why": last_error(log)})}
