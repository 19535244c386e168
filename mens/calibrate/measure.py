"""`python -m mens.calibrate [overrides]` (and `-m` sweeps): measure one training shape's peak
memory through the normal training path and write calibration.json into its run dir.

The parent (this Hydra job) stays light: it compiles the plan — the prediction at this moment —
then runs the measurement in a fresh child process, so one job cannot inflate the next (Hydra
launchers may reuse a worker), and a child killed by the OOM killer or by the
`calibrate.max_rss_gb` guard still leaves a record: a lower bound on that shape's peak.

The child runs `mens.train.run.train_run` unchanged, through its RunHooks:
  before_base  the pre-model baseline is read just before the base model loads;
  callbacks    a Lightning callback (first in the list) resets the high-water mark when
               training starts and reads it after every optimizer step, so model loading,
               evaluation and saving stay outside it.
Readings (mens/train/meter.py): CPU, VmHWM − VmRSS-at-baseline after `5 > /proc/self/clear_refs`;
CUDA, max reserved/allocated after reset_peak_memory_stats; MPS, driver-allocated, sampled.

Several processes (hw.devices > 1, one node): the child is `python -m mens.calibrate.child
<run dir>` (its own module: the heavy imports are the child's alone), so the strategy's launcher (mens/train/strategy.py) starts ranks 1…N-1 by running
that same module again (MENS_RUN_DIR names the run dir). Every rank meters its own window and
writes its own reading file (measure.json for rank 0, measure.rank<r>.json): no collective, so a
rank that dies still leaves what it measured. The parent reads them all; the record's peak is the
per-device one the planner predicts, the maximum over ranks of each rank's window peak, and the
RSS guard applies to each process of the tree (each is one device).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mens.run.rundir import RunDir
from mens.errors import EXIT_FAILED, EXIT_OK

RECORD_SCHEMA = 1
# the measurement child (mens.calibrate.child), run with -m: the launcher re-runs it for ranks > 0
CHILD = "mens.calibrate.child"


# --- parent --------------------------------------------------------------------------------
def prepare(cfg: DictConfig) -> list[str]:
    """Turn a training config into a calibration one: a few optimizer steps, one micro-batch
    per step, the plan forced (a refused shape is worth measuring), a short evaluation."""
    from mens.errors import ConfigError

    c, t, notes = cfg.calibrate, cfg.train, []
    if c.role not in ("fit", "held_out"):
        raise ConfigError(f"`calibrate.role={c.role}` is not valid: it takes fit or held_out.",
                          key="calibrate.role")
    t.max_steps = c.steps
    if t.micro_batch != "auto" and t.grad_accum == "auto" and t.global_batch == "auto":
        t.grad_accum = 1          # accumulation adds time per step, not memory: measure one
    if t.eval_max_records is None:
        t.eval_max_records = c.eval_records
    if not cfg.plan.force:
        cfg.plan.force = True
        notes.append("plan.force=true: calibration measures shapes the planner would refuse")
    devices = cfg.hw.devices if cfg.hw.devices not in (None, "auto") else 1
    if cfg.hw.nodes != 1:   # the parent reads the reading files of its own node only
        raise ConfigError(f"`hw.nodes={cfg.hw.nodes}`: calibration measures one node's "
                          f"processes (a device's peak does not depend on the node count): set "
                          f"hw.nodes=1 and hw.devices to the devices per node.", key="hw.nodes")
    if int(devices) > 1 and cfg.hw.strategy == "auto":
        # each lane under the strategy it scales by (the planner would pick ddp wherever a
        # replica fits, and the sharded cells would never be measured)
        cfg.hw.strategy = "fsdp2" if cfg.lane.method == "full" else "ddp"
        notes.append(f"hw.strategy=auto → {cfg.hw.strategy}: calibration measures the full "
                     f"lane sharded and adapters replicated (name hw.strategy for the other)")
    return notes


def task(cfg: DictConfig, out_dir: Path) -> int:
    from mens.plan.output import plan_run

    notes = prepare(cfg)
    done = _measured_before(cfg, out_dir)
    if done is not None:   # a sweep run again (after a crash or a stop) measures only what is left
        print(f"mens calibrate: already measured ({done['status']}) · {done['cell']} · "
              f"s={done['seq_len']} b={done['micro_batch']} · {out_dir}")
        return EXIT_OK
    spec, plan = plan_run(cfg, out_dir, "train")
    c = cfg.calibrate
    record = base_record(cfg, spec, plan, out_dir)
    record["notes"] += notes
    from mens.calibrate.records import recorded
    hit = recorded(list(c.skip_recorded), record)
    if hit is not None:   # measured in an earlier sitting: its record is in the committed file
        print(f"mens calibrate: already measured ({hit[0]['status']}, record {hit[0]['id']} in "
              f"calibrate.skip_recorded) · {record['cell']} · s={record['seq_len']} "
              f"b={record['micro_batch']} · {out_dir}")
        return EXIT_OK
    world = plan.world_size
    cap = c.max_predicted_gb
    if cap is not None and plan.raw_bytes > cap * 2**30:
        record.update(status="skipped", reason=f"predicted {plan.raw_bytes / 2**30:.2f} GiB "
                      f"exceeds calibrate.max_predicted_gb={cap:g}: not run")
        return finish(record, out_dir)
    weights = None
    if cfg.rung.init == "random" and cfg.lane.method == "qlora":
        weights = materialised_weights(cfg, out_dir)
        if weights is None:
            record.update(status="failed", reason="could not write random weights for qlora "
                          f"(see {out_dir / 'materialise.log'})")
            return finish(record, out_dir)
        record["notes"].append(f"qlora on random weights: bitsandbytes quantises as weights "
                               f"load, so they were written to {weights} first")
    RunDir(out_dir).write_json("calibrate_job.json", {
        "config": OmegaConf.to_container(cfg, resolve=True), "weights": weights,
        "hydra": _hydra_bits(out_dir)}, indent=1)
    limit = int(c.max_rss_gb * 2**30) if c.max_rss_gb else None
    res = run_child(out_dir, limit, c.timeout_s, world)
    record.update(classify(res))
    unpacked_rows(record, out_dir)
    if not c.keep_outputs:   # random-weight models and their optimizer state: nothing to keep
        for name in (RunDir.CHECKPOINTS, RunDir.MODEL, RunDir.ADAPTER):
            shutil.rmtree(out_dir / name, ignore_errors=True)
    return finish(record, out_dir)


def unpacked_rows(record: dict, out_dir: Path) -> None:
    """SFT packs its rows to seq_len; another objective's rows are one record (pair, answer)
    padded to the longest in its batch, or — one that samples in its step (grpo) — the widest
    prompt plus the sampled completion: up to the planned seq_len, often less. The record keeps
    the longest rows its measured steps really had as its seq_len (what the analytic model is
    evaluated at when the record is fitted or checked), the planned one as planned_seq_len,
    and says so."""
    from mens.run.telemetry import Event, read

    lane = record["lane"]
    if lane.get("objective", "sft") == "sft":
        return
    if lane.get("generation_tokens"):          # the step's rows/length (mens.objective.grpo)
        tel = RunDir(out_dir).telemetry
        widths = [r["rows/length"] for r in (read(tel) if tel.is_file() else [])
                  if r.get("event") == Event.TRAIN_STEP and r.get("rows/length")]
    else:                                      # the loader's batches (rows, width)
        widths = [shape[-1] for shape in record.get("batch_shapes") or []]
    if widths and int(max(widths)) != record["seq_len"]:
        record["planned_seq_len"], record["seq_len"] = record["seq_len"], int(max(widths))
        record["notes"].append(f"unpacked rows: the longest measured batch's rows were "
                               f"{record['seq_len']} tokens of the planned "
                               f"{record['planned_seq_len']}; the record is at the former")


def _measured_before(cfg: DictConfig, out_dir: Path) -> dict | None:
    """This job dir's record, when it holds a finished measurement of this very config."""
    try:
        record = json.loads(RunDir(out_dir).calibration.read_text())
        job = json.loads((out_dir / "calibrate_job.json").read_text())
    except (OSError, ValueError):
        return None
    same = job.get("config") == OmegaConf.to_container(cfg, resolve=True)
    return record if same and record.get("status") in ("ok", "lower_bound") else None


def finish(record: dict, out_dir: Path) -> int:
    RunDir(out_dir).write_json(RunDir.CALIBRATION, record)
    m, p = record.get("measured_peak_bytes"), record["predicted_peak_bytes"]
    got = f"measured {m / 2**20:,.0f} MiB" if m is not None else "no measurement"
    print(f"mens calibrate: {record['status']} · {record['cell']} · {record['rung']['name']} "
          f"s={record['seq_len']} b={record['micro_batch']} · {got} · predicted "
          f"{p / 2**20:,.0f} MiB ({'calibrated' if record['predicted']['calibrated'] else 'uncalibrated'})"
          f"{' · ' + record['reason'] if record.get('reason') else ''} · {out_dir}")
    return EXIT_OK if record["status"] in ("ok", "lower_bound", "skipped") else EXIT_FAILED


def base_record(cfg, spec, plan, out_dir: Path) -> dict:
    from mens.plan.memory import Arch, load_contract, model_digest
    from mens.plan.lane import lane_model
    from mens.train.telemetry import git_commit, host

    lane = lane_model(spec.lane, spec.lane.precision, spec.train.init_adapter,
                      spec.spoke.admission.check, spec.plan.contract)
    arch = Arch.of(spec.rung)
    shape = plan.shape
    contract = load_contract(spec.plan.contract)
    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    ident = f"{host()['hostname']}|{date}|{out_dir.resolve()}"
    return {
        "schema": RECORD_SCHEMA,
        "id": f"{spec.rung.name}-{lane.label}-{'ckpt' if shape.checkpointing else 'nockpt'}-"
              f"s{shape.seq_len}-b{shape.micro_batch}-"
              f"{f'{plan.strategy}x{plan.world_size}-' if plan.world_size > 1 else ''}"
              f"{hashlib.sha1(ident.encode()).hexdigest()[:8]}",
        "role": cfg.calibrate.role, "status": "pending", "reason": None,
        # world_size processes under strategy: the peak is one device's (the max over ranks)
        "cell": plan.cell, "world_size": plan.world_size, "strategy": plan.strategy,
        "backend": spec.hw.backend, "lane": asdict(lane),
        "checkpointing": shape.checkpointing, "precision": lane.precision,
        "rung": {"name": spec.rung.name, "init": spec.rung.init, "repo_id": spec.rung.repo_id},
        "arch": asdict(arch), "params": arch.params()["total"],
        "seq_len": shape.seq_len, "micro_batch": shape.micro_batch, "packing": shape.packing,
        "paths": {k: getattr(spec.train, k) for k in ("attention", "loss", "heap")},
        "grad_accum": plan.grad_accum, "steps": cfg.calibrate.steps,
        "measured_peak_bytes": None, "measured_kind": None,
        "predicted_peak_bytes": plan.peak_bytes,
        "predicted": {"raw_bytes": plan.raw_bytes, "peak_bytes": plan.peak_bytes,
                      "uncertainty": plan.uncertainty, "calibrated": plan.calibrated,
                      "components": plan.components, "verdict": plan.verdict,
                      "budget_bytes": plan.budget_bytes, "contract_version": contract["version"],
                      "model_digest": model_digest(contract["model"])},
        "tokens_per_s": None, "hw": {k: getattr(spec.hw, k) for k in
                                     ("name", "backend", "description", "memory_gb")},
        "host": host(), "versions": spec.versions, "git": git_commit(), "date": date,
        "logger": spec.logger.kind, "sweep": _hydra_bits(out_dir).get("sweep_dir"),
        "run_dir": str(out_dir), "notes": list(spec.notes),
    }


def _hydra_bits(out_dir: Path) -> dict:
    try:
        from hydra.core.hydra_config import HydraConfig
        hc = HydraConfig.get()
        mode = str(hc.mode).split(".")[-1]
        return {"mode": mode, "sweep_dir": str(hc.sweep.dir) if mode == "MULTIRUN" else None,
                "run_dir": str(out_dir)}
    except ValueError:   # called outside a Hydra app
        return {"mode": "RUN", "sweep_dir": None, "run_dir": str(out_dir)}


def run_child(out_dir: Path, limit: int | None, timeout_s: float, world: int = 1) -> dict:
    """Run the measurement child; watch the RSS of each of its processes (the guard: each rank
    is one device) and its exit, then its other ranks' exit. Returns what the ranks said
    (measure*.json, merged: see merge_ranks) plus how it ended."""
    import psutil

    from mens.calibrate.records import merge_ranks

    with open(out_dir / "child.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", CHILD, str(out_dir)], stdout=log,
                                stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        ps, seen, killed, t0 = psutil.Process(proc.pid), 0, None, time.time()
        tree: dict[int, psutil.Process] = {proc.pid: ps}

        def alive(ranks: bool = False) -> list:   # ranks: the measuring processes alone
            out = []
            for q in tree.values():
                try:
                    if q.is_running() and q.status() != psutil.STATUS_ZOMBIE and \
                            (not ranks or CHILD in q.cmdline()):
                        out.append(q)
                except psutil.Error:
                    pass
            return out

        ended = None   # rank 0's end: its ranks get a minute to finish and write their readings
        while proc.poll() is None or (world > 1 and alive(ranks=True) and
                                      time.time() - (ended := ended or time.time()) < 60):
            try:   # ranks > 0 are the child's children (kept once seen: they outlive rank 0)
                tree.update((q.pid, q) for q in ps.children(recursive=True))
            except psutil.Error:
                pass
            rss = 0
            for q in alive():
                try:
                    rss = max(rss, q.memory_info().rss)
                except psutil.Error:
                    pass
            seen = max(seen, rss)
            if limit and rss > limit:
                killed = f"killed by the calibrate.max_rss_gb guard at {rss / 2**30:.2f} GiB RSS"
            elif time.time() - t0 > timeout_s:
                killed = f"killed after calibrate.timeout_s={timeout_s:g}"
            if killed:
                for q in alive():
                    try:
                        q.kill()
                    except psutil.Error:
                        pass
                proc.wait()
                break
            time.sleep(0.05)
    said = []
    for r in range(world):
        path = out_dir / ("measure.json" if r == 0 else f"measure.rank{r}.json")
        said.append(json.loads(path.read_text()) if path.is_file() else None)
    return {"pid": proc.pid, "returncode": proc.returncode, "killed": killed, "max_rss_seen": seen,
            "wall_s": round(time.time() - t0, 1),
            "child": (said[0] or {}) if world == 1 else merge_ranks(said)}   # records.py


def classify(res: dict) -> dict:
    """ok: every step measured. lower_bound: died (OOM, guard, signal) inside the window — the
    highest reading so far bounds the true peak from below. failed: nothing to bound with."""
    child, rc = res["child"], res["returncode"]
    steps = child.get("steps") or []
    out = {"measured_kind": child.get("kind"), "baseline_bytes": child.get("baseline_bytes"),
           "load_peak_bytes": child.get("load_peak_bytes"),
           "window_start_bytes": child.get("window_start_bytes"), "step_peaks_bytes":
           [s["peak_bytes"] for s in steps], "batch_shapes": child.get("batch_shapes"),
           "tokens_per_s": child.get("tokens_per_s"), "step_s": child.get("step_s"),
           "child": {"pid": res.get("pid"), "returncode": rc, "wall_s": res["wall_s"],
                     "killed": res["killed"],
                     "error": child.get("error"), "max_rss_seen": res["max_rss_seen"]}}
    if child.get("ranks"):
        out["ranks"] = child["ranks"]
    out.update(child.get("extra") or {})
    if child.get("window_complete"):
        out.update(status="ok", measured_peak_bytes=max(out["step_peaks_bytes"]))
        if rc != 0:   # died after the last measured step (saving, evaluation): still measured
            out["reason"] = f"child ended with {rc} after the measured window: {child.get('error')}"
        return out
    base = child.get("baseline_bytes")
    bound = max(out["step_peaks_bytes"] + [child.get("window_peak_bytes") or 0])
    if base is not None and child.get("kind", "").startswith("cpu"):
        bound = max(bound, res["max_rss_seen"] - base)   # the guard's own samples
    if res["killed"] or child.get("error"):
        why = res["killed"] or child["error"]
    elif rc is not None and rc < 0:
        why = f"child killed by signal {-rc}" + (" (the kernel's OOM killer sends SIGKILL)"
                                                  if rc == -9 else "")
    else:
        why = f"child exited {rc}"
    if base is None or not (child.get("window_started") or res["killed"]) or bound <= 0:
        return {**out, "status": "failed", "reason": why}
    return {**out, "status": "lower_bound", "measured_peak_bytes": int(bound), "reason": why}


def materialised_weights(cfg: DictConfig, out_dir: Path) -> str | None:
    """Random weights of the rung's architecture on disk (cached by architecture), written by
    a child of its own so the measurement child starts clean."""
    from mens.plan.memory import Arch

    arch = asdict(Arch.of(cfg.rung))
    key = hashlib.sha1(json.dumps(arch, sort_keys=True).encode()).hexdigest()[:10]
    target = Path(cfg.calibrate.weights_cache) / f"{cfg.rung.name}-{key}"
    if not (target / "config.json").is_file():
        rung = json.dumps(OmegaConf.to_container(cfg.rung, resolve=True))
        code = ("import sys, json; from mens.calibrate.child import write_random_weights; "
                "write_random_weights(json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]))")
        with open(out_dir / "materialise.log", "w") as log:
            rc = subprocess.run([sys.executable, "-c", code, rung, str(target),
                                 str(cfg.train.seed)], stdout=log, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            return None
    return str(target.resolve())
