"""Each rung × spoke cell's state, from run directories and plans (torch-free).

A cell's run is the newest finished run dir under `ladder.runs` (spec.yaml + summary.json, not a
calibration record, pretrained weights) trained on that rung and the spoke's own corpus. States:

    TRAINED+GATED         its gate.json passes and matches the adapter's bytes (mens.gate);
                          its badge: the gated metric's gain with its interval
    TRAINED·UNGATED       no receipt, a failed one (badge: its first reason), or one voided
                          by a retrain (said which)
    STALE                 the base snapshot, the corpus or the memory contract changed since
                          the run (each reason names what changed)
    BASE_SNAPSHOT_ABSENT  the rung's weights are not in the local hub cache (rung.path / bundled
                          rungs: their directory)
    DOES_NOT_FIT_LOCAL    no run, and the planner refuses the cell on this machine's hw
    TRAIN_NOT_RUN         no run yet, and it fits

What changed is found by comparing with the run's own records: spec.yaml's `rung.commit` with the
snapshot the cache resolves now; `data_lock` sha256s with the files now — for spoke data the
corpus digest the plan recorded (mens.data.corpus.corpus_lock), else the one of its gate
receipt, else (a run by an earlier mens) its files' times against the run's start, said so; the
contract by re-planning the run's spec now and
comparing the predicted peak with its plan.json (the same shape planned differently means the
contract's model or cells changed).
"""
from __future__ import annotations

import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mens.run.hashing import sha256
from mens.config import schema
from mens.config.options import spokes
from mens.config.objectives import lane_fields
from mens.errors import EXIT_OK, MensError
from mens.data.corpus import corpus_lock
from mens.run.receipt import read_receipt, receipt_status
from mens.compare.evals import badge
from mens.plan.memory import GiB
from mens.plan.spec import LADDER, MOE_RUNGS
from mens.resources import CORPORA, option_path
from mens.run.rundir import RunDir
from mens.run.telemetry import first as first_row

STATES = ("TRAINED+GATED", "TRAINED·UNGATED", "STALE", "BASE_SNAPSHOT_ABSENT",
          "DOES_NOT_FIT_LOCAL", "TRAIN_NOT_RUN")
PEAK_TOLERANCE = 0.005   # re-planned peaks within 0.5 % are the same plan (float noise)


def task(cfg: DictConfig, out_dir: Path) -> int:
    result = ladder(cfg)
    RunDir(out_dir).write_json("ladder.json", result)
    print(render(result))
    print(f"mens: wrote {Path(out_dir) / 'ladder.json'}")
    return EXIT_OK


# --- runs ---------------------------------------------------------------------------------------
def started(run: Path) -> float:
    """When the run began: its TRAIN_START row, else spec.yaml's time."""
    rd = RunDir(run)
    row = first_row(rd.telemetry)
    if row:
        return float(row.get("time", rd.spec.stat().st_mtime))
    return rd.spec.stat().st_mtime


def cell_of(spec: dict) -> tuple[str, str] | None:
    """(rung, spoke) of a run trained on a spoke's own corpus with pretrained weights."""
    data = spec.get("data") or {"source": "spoke"}
    rung = spec.get("rung") or {}
    if data.get("source", "spoke") != "spoke" or rung.get("init", "pretrained") != "pretrained":
        return None
    return rung.get("name"), (spec.get("spoke") or {}).get("name")


def runs_by_cell(root: Path | str) -> dict[tuple[str, str], list[Path]]:
    """{(rung, spoke): [run dirs, newest first]} of the finished training runs under root
    (spec.yaml + summary.json, at any depth; calibration records are not runs)."""
    out: dict = {}
    for run in RunDir.find(root, marker=RunDir.SUMMARY, where=lambda rd: rd.spec.is_file()):
        key = cell_of(RunDir(run).read_spec())
        if key:
            out.setdefault(key, []).append(run)
    return {k: sorted(v, key=started, reverse=True) for k, v in out.items()}


# --- what changed since a run -----------------------------------------------------------------
def base_status(rung) -> tuple[bool, str | None, str]:
    """(present, the commit the cache resolves now, where looked) — no network."""
    from mens.source.weights import find_weights

    if rung.get("tokenizer_bundled"):
        return True, None, "bundled with mens"
    st = find_weights(rung.get("repo_id") or "", rung.get("commit") or rung.get("revision"),
                      rung.get("path"))
    if not st.present and rung.get("commit") and not rung.get("path"):
        # the run's snapshot is gone: does the revision resolve to another one now?
        st = find_weights(rung.get("repo_id") or "", rung.get("revision"))
    return st.present, st.resolved_revision, ", ".join(st.looked_in) or "the hub cache"


def base_changes(spec: dict) -> list[str]:
    rung = spec.get("rung") or {}
    if rung.get("tokenizer_bundled") or rung.get("path") or not rung.get("commit"):
        return []
    present, now, _ = base_status({**rung, "commit": None})
    if present and now and now != rung["commit"]:
        return [f"base snapshot: the run used {rung['repo_id']}@{rung['commit'][:12]}, the cache "
                f"resolves {rung.get('revision') or 'main'} to {now[:12]} now"]
    return []


def data_changes(spec: dict) -> list[str]:
    """Files of spec.yaml's data_lock whose content changed or went (user data)."""
    out = []
    for item in spec.get("data_lock") or []:
        path = item.get("path")
        if not path or "sha256" not in item:
            continue
        p = Path(path)
        if not p.is_file():
            out.append(f"data: {path} is gone")
        elif sha256(p) != item["sha256"]:
            out.append(f"data: {path} changed (sha256 {item['sha256'][:12]}… → "
                       f"{sha256(p)[:12]}…)")
    return out


def corpus_changes(run: Path, spoke: str, corpora: Path | str = CORPORA) -> list[str]:
    """The spoke's corpus files changed since the run: by sha256 against its gate receipt's
    corpus_lock, else (no digest recorded) by file time against the run's start."""
    def name(x):   # an earlier receipt named the file `path`
        return x.get("corpus") or x.get("path")
    now = {name(x): x for x in corpus_lock(spoke, corpora)}
    spec = RunDir(run).read_spec() if (Path(run) / RunDir.SPEC).is_file() else {}
    then = [x for x in spec.get("data_lock") or [] if "corpus" in x] or None
    if then is None:
        receipt = read_receipt(run) or {}
        then = (receipt.get("corpus_lock") or {}).get(spoke)
    if then is not None:
        old = {name(x): x for x in then}
        out = [f"corpus {p}: " + ("new" if p not in old else "gone" if p not in now else
                                  f"changed (sha256 {old[p]['sha256'][:12]}… → "
                                  f"{now[p]['sha256'][:12]}…)")
               for p in sorted(set(old) | set(now))
               if p not in old or p not in now or old[p]["sha256"] != now[p]["sha256"]]
        return out
    t0 = started(run)
    folder = Path(corpora) / spoke
    return [f"corpus {spoke}/{p.name}: modified after the run began (file time; the run "
            f"recorded no corpus digest — gate it to record one)"
            for p in sorted(folder.glob("*.jsonl")) if p.stat().st_mtime > t0]


def contract_changes(run: Path, spec: dict) -> list[str]:
    """Re-plan the run's spec now; a different predicted peak means the contract changed."""
    from mens.plan.spec import compile_run, load_rerun

    then = RunDir(run).read_json(RunDir.PLAN).get("peak_bytes")
    if not then:
        return []
    try:
        cfg = load_rerun(str(run))
        cfg.hw.memory_gb = (spec.get("hw") or {}).get("memory_gb")   # no detection: plan only
        _, p = compile_run(cfg, "plan")
    except MensError as e:
        return [f"contract: the run's spec no longer plans ({e.message})"]
    if abs(p.peak_bytes - then) > PEAK_TOLERANCE * then:
        return [f"memory contract: this run's shape is planned at {p.peak_bytes / GiB:.3f} GiB "
                f"now, {then / GiB:.3f} GiB when it ran (cell {p.cell})"]
    return []


# --- plans --------------------------------------------------------------------------------------
def _option(group: str, name: str, cls) -> DictConfig:
    return OmegaConf.merge(OmegaConf.structured(cls), OmegaConf.load(option_path(group, name)))


def plan_cell(cfg: DictConfig, rung: str, spoke: str) -> dict:
    """The planner's verdict for the cell on cfg's hw and lane (purpose plan)."""
    from mens.plan.spec import compile_run

    c = cfg.copy()
    c.rung = _option("rung", rung, schema.RungConfig)
    c.spoke = _option("spoke", spoke, schema.SpokeConfig)
    try:
        spec, p = compile_run(c, "plan")
    except MensError as e:
        return {"fits": None, "peak_bytes": None, "budget_bytes": None, "why": e.message}
    return {"fits": p.fits, "peak_bytes": p.peak_bytes, "budget_bytes": p.budget_bytes,
            "hw": spec.hw.name, "why": None if p.fits else
            f"needs {p.peak_bytes / GiB:.2f} GiB, budget {p.budget_bytes / GiB:.2f} GiB on "
            f"{spec.hw.name}"}


# --- the cell -----------------------------------------------------------------------------------
def cell_state(rung: str, spoke: str, run: Path | None, plan: dict,
               corpora: Path | str = CORPORA) -> dict:
    """One cell: its state, why, and the numbers behind it."""
    from mens.config.options import load_option

    opt = load_option("rung", rung)
    rung_d = {"repo_id": opt.repo_id, "revision": opt.revision, "path": opt.path,
              "tokenizer_bundled": opt.tokenizer_bundled}
    cell = {"rung": rung, "spoke": spoke, "revision": opt.revision or "unpinned",
            "plan_fits": plan["fits"], "plan_peak_bytes": plan["peak_bytes"],
            "budget_bytes": plan["budget_bytes"], "run": None, "runs": 0}
    if run is not None:
        spec = RunDir(run).read_spec()
        summary = RunDir(run).read_summary()
        rung_d = {**rung_d, **(spec.get("rung") or {})}
        receipt = read_receipt(run)
        status, gate_why = receipt_status(run, receipt or {})
        stale = (base_changes(spec) + corpus_changes(run, spoke, corpora) + data_changes(spec)
                 + contract_changes(run, spec))
        cell.update(run=str(run), lane=lane_fields(spec.get("lane"))["lane"],
                    commit=rung_d.get("commit"),
                    planned_peak_bytes=RunDir(run).read_json(RunDir.PLAN).get("peak_bytes"),
                    measured_peak_bytes=summary.get("measured_peak_bytes"),
                    eval_improvement_pct=summary.get("eval_improvement_pct"), stale=stale,
                    gate={"status": status, "why": gate_why,
                          "verdict": (receipt or {}).get("verdict"),
                          "reasons": (receipt or {}).get("reasons"),
                          "guards": (receipt or {}).get("guards"),
                          "metric": (receipt or {}).get("metric"),
                          "in_domain": (receipt or {}).get("in_domain"),
                          "badge": badge(receipt, status)})
    present, resolved, looked = base_status(rung_d)
    cell["base_present"] = present
    if not present:
        state, why = "BASE_SNAPSHOT_ABSENT", (f"{rung_d.get('path') or rung_d.get('repo_id')} "
                                              f"weights not found (looked in {looked})")
        if run is None and plan["fits"] is False:
            state, why = "DOES_NOT_FIT_LOCAL", plan["why"]
    elif run is None:
        state, why = (("DOES_NOT_FIT_LOCAL", plan["why"]) if plan["fits"] is False else
                      ("TRAIN_NOT_RUN", plan["why"] or "fits; no run yet"))
    elif cell["stale"]:
        state, why = "STALE", "; ".join(cell["stale"])
    elif cell["gate"]["status"] == "pass":
        state, why = "TRAINED+GATED", cell["gate"]["why"]
    else:
        state, why = "TRAINED·UNGATED", cell["gate"]["why"]
    cell.update(state=state, why=why)
    return cell


def ladder(cfg: DictConfig, rungs: list[str] | None = None, spoke_names: list[str] | None = None,
           corpora: Path | str = CORPORA) -> dict:
    """Every cell of rungs × spokes (default: the ladder × every shipped spoke)."""
    rungs = rungs or [*LADDER, *MOE_RUNGS]
    spoke_names = spoke_names or spokes()
    root = Path(cfg.ladder.runs)
    runs = runs_by_cell(root)
    cells = []
    for r in rungs:
        for s in spoke_names:
            found = runs.get((r, s), [])
            cell = cell_state(r, s, found[0] if found else None, plan_cell(cfg, r, s), corpora)
            cell["runs"] = len(found)
            cells.append(cell)
    return {"runs_root": str(root.resolve()), **lane_fields(cfg.lane), "hw": cfg.hw.name,
            "generated": time.time(), "rungs": rungs, "spokes": spoke_names, "cells": cells}


SHORT = {"TRAINED+GATED": "gated", "TRAINED·UNGATED": "ungated", "STALE": "STALE",
         "BASE_SNAPSHOT_ABSENT": "no base", "DOES_NOT_FIT_LOCAL": "no fit",
         "TRAIN_NOT_RUN": "not run"}


def render(result: dict) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    buf = StringIO()
    con = Console(file=buf, width=160, force_terminal=False, color_system=None)
    by = {(c["rung"], c["spoke"]): c for c in result["cells"]}
    t = Table(title=f"ladder · lane {result['lane']} · hw {result['hw']} · runs under "
                    f"{result['runs_root']}", show_edge=False)
    t.add_column("rung")
    for s in result["spokes"]:
        t.add_column(s)
    for r in result["rungs"]:
        t.add_row(r, *(SHORT[by[(r, s)]["state"]] for s in result["spokes"]))
    con.print(t)
    d = Table(show_edge=False, title="cells with runs")
    for col in ("cell", "state", "base", "peak measured / planned GiB", "gate", "why"):
        d.add_column(col)
    for c in result["cells"]:
        if c["run"] is None:
            continue
        meas, plan = c.get("measured_peak_bytes"), c.get("planned_peak_bytes")
        peak = (f"{meas / GiB:.3f} / {plan / GiB:.3f}" if meas and plan else "—")
        base = f"{c['revision']}@{(c.get('commit') or '—')[:12]}"
        gate = c["gate"]["status"] + (f": {c['gate']['badge']}" if c["gate"]["badge"] else "")
        d.add_row(f"{c['rung']} × {c['spoke']}", c["state"], base, peak, gate, c["why"] or "")
    if d.row_count:
        con.print(d)
    con.print("states: " + ", ".join(f"{SHORT[s]} = {s}" for s in STATES))
    return buf.getvalue().rstrip()
