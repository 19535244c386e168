"""`make calibrate-gpu` (mens.calibrate.gpu) up to where a CUDA device is needed: without one
it stops at its check (exit 2, one sentence, no traceback, nothing written); its dry run plans
the real job list for a named tier — every rung the planner fits, the ones it does not skipped —
and the time budget drops the jobs it cannot start. The jobs themselves need a GPU."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mens.calibrate.gpu import RUNGS, Job, Schedule, plan_jobs
from mens.cli.calibrate_gpu import main

ROOT = Path(__file__).resolve().parents[2]
SENTENCE = "make calibrate-gpu needs a CUDA GPU and this machine has none"
# no device visible, even on a machine that has one: the check is what is tested
NO_CUDA = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}


def one_sentence(err: str) -> None:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith(f"mens: error (exit 2): {SENTENCE} ("), err
    assert [line for line in lines if line.startswith("mens: error")] == [lines[-1]], err
    assert "run it on a machine with one NVIDIA GPU" in lines[-1], err


def test_without_cuda_the_module_exits_2_with_one_sentence(tmp_path):
    res = subprocess.run([sys.executable, "-m", "mens.cli.calibrate_gpu"], cwd=tmp_path,
                         env=NO_CUDA, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    one_sentence(res.stderr)
    assert res.stdout == "" and not list(tmp_path.iterdir())   # stopped before any work


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_without_cuda_make_calibrate_gpu_exits_2(tmp_path):
    # -o install: the venv is this one (PY=), never reinstalled by a test
    res = subprocess.run(["make", "-s", "-o", "install", f"PY={sys.executable}",
                          "calibrate-gpu"], cwd=ROOT, env=NO_CUDA, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    one_sentence("\n".join(line for line in res.stderr.splitlines()
                           if not re.match(r"make(\[\d+\])?: \*\*\*", line)))   # make[1] under `make test`


def test_a_dry_run_needs_a_tier_and_known_names(capsys):
    assert main(["--dry-run"]) == 2
    assert "--tier" in capsys.readouterr().err
    assert main(["--dry-run", "--tier", "h200", "--rungs", "70b"]) == 2
    assert "--rungs 70b" in capsys.readouterr().err


def test_the_h200_dry_run_lists_lora_from_0_6b_to_32b(capsys):
    assert main(["--dry-run", "--tier", "h200", "--lanes", "lora"]) == 0
    out = capsys.readouterr().out
    assert "h200" in out and "memory budget 133.24 GiB" in out and "time budget 600 s" in out
    rows = {line.split()[1]: line for line in out.splitlines()
            if line.strip()[:1].isdigit() and "-lora-" in line}
    for rung in RUNGS:   # 32b LoRA fits 141 GB: every rung is planned, none skipped
        row = rows[f"{rung}-lora-ckpt-s1024-b1"]
        assert "cuda/lora/ckpt/bf16" in row and "skipped" not in row, row
        assert float(row.split()[3]) > 0   # its predicted peak, GiB
    assert list(rows)[:3] == ["0.6b-lora-ckpt-s1024-b1", "0.6b-lora-nockpt-s1024-b1",
                              "32b-lora-ckpt-s1024-b1"]   # every cell first, then the far end
    assert "(dry run: nothing ran)" in out and "not run:" in out


def test_rtx4090_skips_the_full_rungs_that_do_not_fit_and_the_budget_drops_jobs():
    jobs, info = plan_jobs(["hw=rtx4090"], [], lanes=("full",))
    assert info["hw"] == "rtx4090"
    by_id = {j.id: j for j in jobs}
    assert by_id["0.6b-full-ckpt-s1024-b1"].status == "planned"
    for rung in RUNGS[1:]:
        job = by_id[f"{rung}-full-ckpt-s1024-b1"]
        assert job.status == "skipped" and "does not fit rtx4090" in job.reason, job
        assert job.predicted_peak_bytes > job.budget_bytes
    fits = [j for j in jobs if j.status == "planned"]
    assert len(fits) >= 3
    # all of them within a generous budget; the first two only within their own time
    assert all(j.status == "planned" for j in Schedule(1e6).plan([Job(**_fields(j)) for j in fits]))
    cut = Schedule(fits[0].predicted_s + fits[1].predicted_s + 1).plan(
        [Job(**_fields(j)) for j in fits])
    assert [j.status for j in cut] == ["planned", "planned"] + ["budget"] * (len(fits) - 2)
    assert "would pass the" in cut[2].reason


def test_jobs_that_overran_shrink_what_is_left():
    """The observed/predicted ratio of finished jobs scales the next predictions."""
    sched = Schedule(100.0, spent_s=40.0)
    job = Job("0.6b", "lora", True, 1024, 1, predicted_s=50.0)
    assert sched.admits(job)
    sched.observed.append((50.0, 75.0))   # the first job took 1.5× its prediction
    assert sched.factor == 1.5 and not sched.admits(job)


def _fields(job: Job) -> dict:
    from dataclasses import asdict
    return {**asdict(job), "status": "planned", "reason": ""}
