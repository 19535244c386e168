"""`make calibrate-gpu` (`python -m mens.cli.calibrate_gpu [--dry-run --tier T] [overrides]`):
the CUDA cells measured on one GPU in about ten minutes, with random weights of the real rungs.

It checks for a CUDA device first (none: one sentence, exit 2), plans every job against this
device (mens.plan, the tier `hw=auto` resolves to), orders them so the most useful come first,
and runs them one by one through `mens.calibrate.measure.task` — the same parent/child
measurement `python -m mens.calibrate` makes — until the time budget (`--budget-s`) would be
exceeded; a job still running at its end is stopped (calibrate.timeout_s: a lower bound). Records land in outputs/calibration/<stamp>_gpu/; it prints the `make fit` command
that fits from them and commits nothing. `--dry-run --tier <tier>` plans the same list for a
named tier on any machine (this is how it is tested without a GPU).

Order (the first jobs are the ones a fit cannot do without):
  1. every cell (lane × checkpointing, bf16) once: 0.6b at the primary shape, contract paths;
  2. the larger rungs at the primary shape, ascending, up to the largest the planner fits
     (how the peak scales with parameters: the one thing only a big GPU can measure);
  3. more shapes (seq_len × micro_batch) on 0.6b then 1.7b (how it scales with tokens);
  4. the other training paths on 0.6b — SDPA over the 4-D block mask, and the full-logits loss —
     counted by `mens fit`, never fitted (the contract's cells are fitted on its own paths).
The contract's paths are train.attention=per_record and train.loss=chunked: on CUDA
per_record runs flash-attn's varlen kernel where `flash_attn` imports (else one SDPA call per
record), and chunked runs Liger's fused linear cross-entropy where `liger_kernel` imports (else
mens's chunked CE). mens picks the kernel itself, so one machine measures one of each pair; the
other is listed as not run, with why.
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata as md
import importlib.util
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mens.errors import EXIT_FAILED, EXIT_OK, ConfigError, MensError
from mens.run.rundir import atomic_write

RUNGS = ("0.6b", "1.7b", "4b", "8b", "14b", "32b")   # conf/rung/, smallest first
LANES = ("lora", "qlora", "full")
PRIMARY = (1024, 1)                                  # (seq_len, micro_batch) of every cell
MORE_SHAPES = ((512, 1), (2048, 1), (1024, 2), (4096, 1))
SHAPE_RUNGS = ("0.6b", "1.7b")
OTHER_PATHS = (("block_mask", "auto", "SDPA with the 4-D block mask"),
               ("auto", "full_logits", "the full-logits loss"))
BASE = ("+recipe=calib_cuda", "hw.devices=1")
BUDGET_S = 600.0
# Seconds a job takes besides its steps: UNMEASURED guesses (no GPU here), corrected as the run
# goes by the ratio observed/predicted of the jobs already done (Schedule.factor).
START_S = 35.0           # parent plan + child interpreter, imports, Lightning, evaluation
INIT_S_PER_GPARAM = 3.0  # building random weights and moving them to the device
QLORA_S_PER_GPARAM = 12.0  # qlora: writing bf16 weights first, quantising them as they load
STEP_FLOOR_S = 0.5       # a step is never faster than this (launch + optimizer overheads)


@dataclass
class Job:
    rung: str
    lane: str
    ckpt: bool
    seq_len: int
    micro_batch: int
    attention: str = "auto"
    loss: str = "auto"
    why: str = ""
    cell: str = ""
    verdict: str = ""
    predicted_peak_bytes: int = 0
    budget_bytes: int = 0
    params: int = 0
    tokens_per_s: float | None = None
    predicted_s: float = 0.0
    status: str = "planned"   # planned | skipped | ran | failed | budget
    reason: str = ""
    observed_s: float | None = None
    run_dir: str | None = None

    @property
    def id(self) -> str:
        paths = "".join(f"-{v}" for v in (self.attention, self.loss) if v != "auto")
        return (f"{self.rung}-{self.lane}-{'ckpt' if self.ckpt else 'nockpt'}-s{self.seq_len}-"
                f"b{self.micro_batch}{paths}")

    def overrides(self) -> list[str]:
        return [f"rung={self.rung}", f"lane={self.lane}",
                f"lane.gradient_checkpointing={str(self.ckpt).lower()}",
                f"train.seq_len={self.seq_len}", f"train.micro_batch={self.micro_batch}",
                f"train.attention={self.attention}", f"train.loss={self.loss}"]


def candidates(rungs=RUNGS, lanes=LANES) -> list[Job]:
    """Every job worth running (on these rungs and lanes), in the module doc's groups."""
    cells = [(lane, ckpt) for lane in lanes for ckpt in (True, False)]
    first = [r for r in RUNGS if r in rungs][:1]
    jobs = [Job(r, lane, ckpt, *PRIMARY, why="cell") for r in first for lane, ckpt in cells]
    jobs += [Job(r, lane, ckpt, *PRIMARY, why="rung") for r in rungs if r not in first
             for lane, ckpt in cells]
    jobs += [Job(r, lane, ckpt, s, b, why="shape") for r in SHAPE_RUNGS if r in rungs
             for s, b in MORE_SHAPES for lane, ckpt in cells]
    jobs += [Job(r, lane, True, *PRIMARY, attention=a, loss=loss, why=f"path: {what}")
             for r in first for a, loss, what in OTHER_PATHS for lane in lanes]
    return jobs


def priority(job: Job) -> tuple:
    """Sort key, most valuable first: every cell once; each lane's largest rung that fits with
    checkpointing, then the next largest (the param range's far end is what only a big GPU
    measures); token scaling on the smallest rung; rungs without checkpointing; more shapes;
    the other paths."""
    size = -RUNGS.index(job.rung)
    return {"cell": (0,), "rung": (1, size) if job.ckpt else (3, size),
            "shape": (2,) if job.rung == RUNGS[0] else (4,)}.get(job.why, (5,))


def kernels() -> tuple[dict, list[dict]]:
    """What the contract's paths run on CUDA here, and the kernels this machine cannot measure."""
    flash = importlib.util.find_spec("flash_attn") is not None
    liger = importlib.util.find_spec("liger_kernel") is not None
    ran = {"attention": "flash-attn varlen (per_record)" if flash else "SDPA per record",
           "loss": "Liger fused linear CE (chunked)" if liger else "mens chunked CE"}
    not_run = [
        {"what": "flash-attn varlen", "why": "flash_attn is not importable: train.attention="
         "per_record runs one SDPA call per record instead (pip install flash-attn)"} if not flash
        else {"what": "SDPA per record", "why": "flash_attn is installed, and on CUDA "
              "train.attention=per_record always takes its varlen kernel"},
        {"what": "Liger fused linear CE", "why": "liger_kernel is not importable: train.loss="
         "chunked runs mens's chunked CE (pip install liger-kernel)"} if not liger
        else {"what": "mens chunked CE", "why": "liger_kernel is installed, and on CUDA "
              "train.loss=chunked always takes Liger's fused linear CE"}]
    return ran, not_run


def predict_s(job: Job, steps: int) -> float:
    """Wall seconds of one job: start-up, weights, then `steps` steps at the planner's tokens/s."""
    gparams = job.params / 1e9
    init = gparams * (INIT_S_PER_GPARAM + (QLORA_S_PER_GPARAM if job.lane == "qlora" else 0.0))
    tokens = job.seq_len * job.micro_batch
    step = max(STEP_FLOOR_S, tokens / job.tokens_per_s if job.tokens_per_s else 2.0)
    return round(START_S + init + steps * step, 1)


def plan_jobs(hw: list[str], extra: list[str], rungs=RUNGS,
              lanes=LANES) -> tuple[list[Job], dict]:
    """Plan every candidate on `hw` (overrides naming the tier, or hw=auto): its predicted peak,
    verdict and time; a job the planner refuses is skipped. Returns them in priority order.
    Composes once per rung × lane (composing is most of the time a dry run takes)."""
    from mens.config.compose import compose
    from mens.plan.memory import Arch
    from mens.plan.spec import compile_run

    jobs, composed, info = candidates(rungs, lanes), {}, {}
    for job in jobs:
        key = (job.rung, job.lane)
        if key not in composed:
            composed[key] = compose([*BASE, *hw, f"rung={job.rung}", f"lane={job.lane}", *extra])
        cfg = composed[key]          # set in place: compile_run plans a copy
        t = cfg.train
        t.seq_len, t.micro_batch, t.attention, t.loss = (job.seq_len, job.micro_batch,
                                                         job.attention, job.loss)
        cfg.lane.gradient_checkpointing = job.ckpt
        try:
            spec, p = compile_run(cfg, "plan")
        except MensError as e:   # a combination mens cannot plan: listed, never run
            job.status, job.reason = "skipped", e.message
            continue
        info = {"hw": spec.hw.name, "memory_gb": spec.hw.memory_gb, "budget_gb":
                round(p.budget_bytes / 2**30, 2), "description": spec.hw.description}
        job.cell, job.verdict, job.budget_bytes = p.cell, p.verdict, p.budget_bytes
        job.predicted_peak_bytes, job.tokens_per_s = p.peak_bytes, p.est_tokens_per_s
        job.params = Arch.of(spec.rung).params()["total"]
        job.predicted_s = predict_s(job, int(cfg.calibrate.steps))
        where = spec.hw.name if hw else spec.hw.description
        if not p.fits:
            job.status = "skipped"
            job.reason = (f"does not fit {where}: predicted {p.peak_bytes / 2**30:.1f} GiB "
                          f"> budget {p.budget_bytes / 2**30:.1f} GiB")
    return sorted(jobs, key=priority), info


def qlora_here(params: int, cache: str) -> str:
    """Why this machine cannot run a qlora job ('' when it can): bitsandbytes, or the disk the
    random weights are written to first (bf16; a 32b rung's are 61 GiB)."""
    import shutil

    from mens.plan.hardware import qlora_support

    ok, why = qlora_support("cuda")
    if not ok:
        return f"lane=qlora cannot run here ({why})"
    target = Path(cache).resolve()
    while not target.exists():
        target = target.parent
    need, free = params * 2 * 1.05, shutil.disk_usage(target).free
    if need > free:
        return (f"its random weights need {need / 2**30:.0f} GiB on disk under {cache} and "
                f"{free / 2**30:.0f} GiB are free")
    return ""


@dataclass
class Schedule:
    """The time budget: a job starts only if its predicted time, scaled by how far the jobs
    already done overran (or underran) their predictions, fits in what is left."""
    budget_s: float
    spent_s: float = 0.0
    observed: list = field(default_factory=list)   # (predicted, observed) of finished jobs

    @property
    def factor(self) -> float:
        pred = sum(p for p, _ in self.observed)
        return sum(o for _, o in self.observed) / pred if pred else 1.0

    def admits(self, job: Job) -> bool:
        return self.spent_s + job.predicted_s * self.factor <= self.budget_s

    def plan(self, jobs: list[Job]) -> list[Job]:
        """Dry run: mark the jobs that would start within the budget, in order."""
        for job in jobs:
            if job.status != "planned":
                continue
            if self.admits(job):
                self.spent_s += job.predicted_s
            else:
                job.status = "budget"
                job.reason = (f"predicted {job.predicted_s:.0f} s would pass the {self.budget_s:.0f} s "
                              f"budget ({self.spent_s:.0f} s planned before it)")
        return jobs


def cuda_device() -> dict:
    """The one CUDA device this runs on; none → ConfigError with one sentence (exit 2)."""
    from mens.plan.detect import DetectionError, detect

    try:
        det = detect("cuda")
    except DetectionError:
        try:
            torch = f"torch {md.version('torch')}"
        except md.PackageNotFoundError:
            torch = "torch not installed"
        raise ConfigError(
            f"make calibrate-gpu needs a CUDA GPU and this machine has none ({torch}, CUDA not "
            f"available): run it on a machine with one NVIDIA GPU; `make fit` refits from "
            f"records you copy back.", key="hw") from None
    return asdict(det)


def table(jobs: list[Job]) -> str:
    rows = [f"  {'#':>3} {'job':<44} {'cell':<24} {'peak GiB':>8} {'time s':>7}  status"]
    for i, j in enumerate(jobs):
        peak = f"{j.predicted_peak_bytes / 2**30:8.1f}" if j.predicted_peak_bytes else f"{'-':>8}"
        rows.append(f"  {i:>3} {j.id:<44} {j.cell:<24} {peak} {j.predicted_s:7.0f}  {j.status}"
                    f"{' (' + j.why + ')' if j.status == 'planned' else ': ' + j.reason}")
    return "\n".join(rows)


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="make calibrate-gpu ARGS=...", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true",
                    help="plan the job list and print it; run nothing (works without a GPU)")
    ap.add_argument("--tier", help="plan for this hw tier (conf/hw/), e.g. h200 (dry run: required)")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S,
                    help=f"stop starting jobs past this many seconds (default {BUDGET_S:g})")
    ap.add_argument("--rungs", default=",".join(RUNGS),
                    help=f"rungs to measure, comma-separated (default {','.join(RUNGS)})")
    ap.add_argument("--lanes", default=",".join(LANES),
                    help=f"lanes to measure, comma-separated (default {','.join(LANES)})")
    ap.add_argument("--out", help="records dir (default outputs/calibration/<stamp>_gpu)")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides added to every job, e.g. "
                    "logger=none calibrate.steps=4 (not the keys each job sets: its shape)")
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.dry_run and not args.tier:
        raise ConfigError("--dry-run plans for a named tier: add --tier <tier> (conf/hw/, e.g. "
                          "--tier h200).", key="hw")
    det = None if args.dry_run else cuda_device()
    rungs, lanes = args.rungs.split(","), args.lanes.split(",")
    for name, given, known in (("--rungs", rungs, RUNGS), ("--lanes", lanes, LANES)):
        if set(given) - set(known):
            raise ConfigError(f"{name} {','.join(given)}: it takes {', '.join(known)} "
                              f"(comma-separated).", key=name)
    hw = [f"hw={args.tier}"] if args.tier else []
    jobs, info = plan_jobs(hw, args.overrides, rungs, lanes)
    if det is not None:   # hw=auto: the tier this device is (its speeds, its headroom policy)
        from mens.plan.hardware import cuda_tier
        info["hw"] = cuda_tier(det["device_name"], det["total_gb"]) or "no named tier"
    ran, not_run = kernels()
    print(f"mens calibrate-gpu: {info.get('hw')} ({info.get('description')}), memory budget "
          f"{info.get('budget_gb')} GiB per job, time budget {args.budget_s:.0f} s; with the "
          f"packages installed here the contract's paths run {ran['attention']} and "
          f"{ran['loss']}")
    for item in not_run:
        print(f"  not run: {item['what']}: {item['why']}")
    if args.dry_run:
        Schedule(args.budget_s).plan(jobs)
        print(table(jobs))
        n = sum(j.status == "planned" for j in jobs)
        print(f"{n} of {len(jobs)} jobs would run in the {args.budget_s:.0f} s budget "
              f"(dry run: nothing ran)")
        return EXIT_OK
    return run_jobs(jobs, args, det, not_run)


def run_jobs(jobs: list[Job], args, det: dict, not_run: list[dict]) -> int:
    from mens.calibrate.measure import task
    from mens.config.compose import compose

    stamp = dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    root = Path(args.out or f"outputs/calibration/{stamp}_gpu")
    sched, t0 = Schedule(args.budget_s), time.time()

    def save():
        atomic_write(root / "calibrate_gpu.json", json.dumps(
            {"device": det, "budget_s": args.budget_s, "overrides": args.overrides,
             "not_run": not_run, "jobs": [{"id": j.id, **asdict(j)} for j in jobs]}, indent=1))

    for i, job in enumerate(jobs):
        sched.spent_s = time.time() - t0
        if job.status != "planned":
            continue
        if not sched.admits(job):
            job.status = "budget"
            job.reason = (f"predicted {job.predicted_s * sched.factor:.0f} s with "
                          f"{max(args.budget_s - sched.spent_s, 0):.0f} s of the budget left")
            continue
        out, start = root / f"{i:03d}_{job.id}", time.time()
        try:
            # a job still running when the budget ends is stopped there: a lower-bound record
            left = f"calibrate.timeout_s={max(args.budget_s - sched.spent_s, 1):.0f}"
            cfg = compose([*BASE, *job.overrides(), left, *args.overrides])
            if job.lane == "qlora":   # checked now: earlier qlora jobs' weights fill the disk
                job.reason = qlora_here(job.params, cfg.calibrate.weights_cache)
                if job.reason:
                    job.status = "skipped"
                    continue
            out.mkdir(parents=True, exist_ok=True)
            code = task(cfg, out)
        except MensError as e:   # this job's own trouble: said, and the next one runs
            code, job.reason = e.code, e.message
        job.observed_s, job.run_dir = round(time.time() - start, 1), str(out)
        job.status = "ran" if code == EXIT_OK else "failed"
        sched.observed.append((job.predicted_s, job.observed_s))
        save()
    save()
    done = sum(j.status == "ran" for j in jobs)
    print(f"mens calibrate-gpu: {done} jobs measured, "
          f"{sum(j.status == 'failed' for j in jobs)} failed, "
          f"{sum(j.status == 'budget' for j in jobs)} left for the budget, "
          f"{sum(j.status == 'skipped' for j in jobs)} skipped in "
          f"{time.time() - t0:.0f} s; records under {root} (nothing committed)")
    print(f"fit from them: make fit ARGS=\"calibrate.records=[{root}]\"")
    return EXIT_OK if done else EXIT_FAILED
