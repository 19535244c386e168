"""`python -m mens` as a user runs it: bad data (exit 2), a diverging loss (exit 4), Ctrl-C
(exit 130, then resume), and a Hydra multirun whose wandb runs share one group."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from train_util import FAST_TRAIN
from wandb_util import wandb_groups, wandb_run
from mens.resources import CORPORA
from mens.run.telemetry import read

FAST = FAST_TRAIN


def mens(*args, cwd: Path, timeout: int = 600, env: dict | None = None
         ) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}, **(env or {})}
    return subprocess.run([sys.executable, "-m", "mens", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_corrupt_jsonl_exits_2_naming_file_and_line(tmp_path):
    good = (CORPORA / "vox_lang/programs.jsonl").read_text()
    lines = good.splitlines()[:5]
    lines.insert(3, '{"messages": [ this is not json')
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    res = mens(*FAST, f"spoke.sources=[{{name: bad, weight: 1.0, path: {bad}}}]",
               f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert f"{bad}:4" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "run" / "summary.json").exists()
    assert not (tmp_path / "run" / "adapter").exists()


def test_diverging_loss_exits_4_and_keeps_the_checkpoint(tmp_path):
    # lr 1e30: the first AdamW step moves every LoRA B entry by ~1e30, so the next forward
    # overflows fp32 and the loss is inf/nan — a real divergence, not an injected one
    res = mens(*FAST, "lane.optimizer.lr=1e30", "train.max_steps=6", "train.checkpoint_every=1",
               "train.warmup_ratio=0", "train.grad_clip=0", f"hydra.run.dir={tmp_path}/run",
               cwd=tmp_path)
    assert res.returncode == 4, res.stderr
    assert "loss became" in res.stderr and "Traceback" not in res.stderr
    run = tmp_path / "run"
    assert (run / "checkpoints" / "last.ckpt").exists()
    assert not (run / "summary.json").exists() and not (run / "adapter").exists()
    rows = read(run / "telemetry.jsonl")
    failed = [r for r in rows if r["event"] == "TRAIN_FAILED"]
    assert failed and failed[0]["exit_code"] == 4 and failed[0]["checkpoint"]


@pytest.mark.slow   # in `make test-slow` (CI runs it): keeps `make test` near 20 min
def test_ctrl_c_checkpoints_exits_130_and_resumes(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "mens", *FAST, "train.max_steps=10",
                             "train.checkpoint_every=100", f"hydra.run.dir={run}"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tel, deadline = run / "telemetry.jsonl", time.time() + 600
    while time.time() < deadline:   # interrupt once training is under way
        if tel.exists() and any(r["event"] == "TRAIN_STEP" and r["step"] >= 2 for r in read(tel)):
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "resume" in err and "Traceback" not in err
    assert (run / "checkpoints" / "last.ckpt").exists() and not (run / "summary.json").exists()
    stopped = max(r["step"] for r in read(tel) if r["event"] == "TRAIN_STEP")
    assert stopped < 10
    again = mens(f"resume={run}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    steps = [r["step"] for r in read(tel) if r["event"] == "TRAIN_STEP"]
    summary = json.loads((run / "summary.json").read_text())
    assert steps[-1] == 10 and summary["steps"] == 10
    # the resumed window opens after the checkpoint restore (as calibration's does), so it
    # keeps the plan's promise: at most the planned peak, with the 64 MiB acceptance below
    # 512 MiB for glibc's noise (read here 397-404 MiB against 386 MiB raw; once 459 in CI)
    assert 0 < summary["measured_peak_bytes"] <= summary["predicted_peak_bytes"] + 64 * 2**20, \
        summary


@pytest.mark.slow   # in `make test-slow` (CI runs it): keeps `make test` near 20 min
def test_multirun_sweep_gives_each_job_a_run_dir_and_one_wandb_group(tmp_path):
    """Issue #17's acceptance, shortened (the full one: test_acceptance_sweep, slow): each
    job's wandb run holds per-step lr, tokens/s and memory, eval/loss points, a descriptive
    name of its own, the sweep's group, job_type train, the spec as nested config and its
    adapter as an artifact; WANDB_PROJECT names the project."""
    fast = [a for a in FAST if not a.startswith("logger=")] + ["train.eval_max_records=2"]
    res = mens("-m", "lane=lora,qlora", "spoke=vox_lang,mcp_tool_chain", *fast,
               "logger=wandb", "train.max_steps=2", "train.eval_every=2", "train.seq_len=512",
               cwd=tmp_path, timeout=900, env={"WANDB_PROJECT": "x"})
    assert res.returncode == 0, res.stdout + res.stderr
    jobs = sorted(p.parent for p in tmp_path.glob("outputs/multirun/*/*/*/summary.json"))
    assert len(jobs) == 4
    seen = set()
    for job in jobs:
        assert json.loads((job / "outcome.json").read_text())["exit_code"] == 0
        summary = json.loads((job / "summary.json").read_text())
        seen.add((summary["lane"], summary["spoke"]))
    assert seen == {(l, s) for l in ("lora", "qlora") for s in ("vox_lang", "mcp_tool_chain")}
    sweep = jobs[0].parent   # outputs/multirun/<date>/<time>: one group, named after it
    assert set().union(*(wandb_groups(j) for j in jobs)) == {f"{sweep.parent.name}_{sweep.name}"}
    check_wandb_runs(jobs, steps=2, evals=2, project="x")
    # mens.export logs the GGUFs it writes as an artifact naming the adapter's (offline: in
    # its metadata; wandb cannot use an artifact offline)
    exp = subprocess.run([sys.executable, "-m", "mens.export", f"run={jobs[0]}",
                          "export.gguf=[f16]", "export.merged=false", "export.base_gguf=null",
                          "export.modelfile=false"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "WANDB_PROJECT": "x"})
    assert exp.returncode == 0, exp.stdout + exp.stderr
    w = wandb_run(jobs[0] / "export")
    assert w["run"].job_type == "export" and w["run"].project == "x"
    [art] = w["artifacts"]
    meta = json.loads(art.metadata)
    assert art.type == "gguf" and {c.path for c in art.manifest.contents} == \
        {"model-f16.gguf", "adapter.gguf"}
    assert meta["source_artifact"] == wandb_run(jobs[0])["artifacts"][0].name


def check_wandb_runs(jobs: list[Path], steps: int, evals: int, project: str) -> None:
    names = set()
    for job in jobs:
        w = wandb_run(job)
        run = w["run"]
        assert run.project == project and run.job_type == "train"
        summary = json.loads((job / "summary.json").read_text())
        assert run.display_name.startswith(f"tiny-{summary['spoke']}-{summary['lane']}-")
        names.add(run.display_name)
        assert {"lane:" + summary["lane"], "rung:tiny", "hw:cpu"} <= set(run.tags)
        config = {i.key: json.loads(i.value_json) for i in run.config.update}
        # nested: wandb filters by lane.method / lane.objective
        assert (config["lane"]["method"], config["lane"]["objective"]) == \
            (summary["method"], summary["objective"])
        assert isinstance(config["train"]["seq_len"], int)
        per_step = [h for h in w["history"] if "train/lr" in h]
        assert [h["trainer/global_step"] for h in per_step] == list(range(1, steps + 1))
        for h in per_step:
            assert {"train/loss", "perf/tokens_per_sec", "mem/peak_mb", "train/grad_norm",
                    "mem/planned_peak_mb"} <= set(h), h
        assert len([h for h in w["history"] if "eval/loss" in h]) == evals
        # the run's final numbers reach wandb's summary, for the UI's run table
        assert {"eval_loss_base", "eval_loss_adapter", "predicted_peak_bytes",
                "measured_peak_bytes", "collateral/eval_loss_adapter"} <= w["summary"]
        [art] = w["artifacts"]
        assert art.name == f"adapter-{run.run_id}" and art.type == "adapter"
        assert {"adapter_model.safetensors", "adapter_config.json"} \
            <= {c.path for c in art.manifest.contents}
    assert len(names) == len(jobs)


@pytest.mark.slow
def test_acceptance_sweep(tmp_path):
    """`python -m mens -m lane=lora,qlora train.max_steps=12 train.eval_every=4`, wandb
    offline, as the issue states it (on the fast CPU shape)."""
    fast = [a for a in FAST if not a.startswith("logger=")]
    res = mens("-m", "lane=lora,qlora", "train.max_steps=12", "train.eval_every=4", *fast,
               cwd=tmp_path, timeout=1800, env={"WANDB_PROJECT": "mens"})
    assert res.returncode == 0, res.stdout + res.stderr
    jobs = sorted(p.parent for p in tmp_path.glob("outputs/multirun/*/*/*/summary.json"))
    assert len(jobs) == 2 and len(set().union(*(wandb_groups(j) for j in jobs))) == 1
    check_wandb_runs(jobs, steps=12, evals=4, project="mens")


@pytest.mark.slow   # in `make test-slow` (CI runs it): keeps `make test` near 20 min
def test_sigusr1_checkpoints_now_and_training_goes_on(tmp_path):
    """The studio's "checkpoint now": SIGUSR1 → last.ckpt at the next optimizer step, a
    CHECKPOINT row with reason "requested", and the run still finishes (exit 0)."""
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "mens", *FAST, "train.max_steps=12",
                             "train.checkpoint_every=100", f"hydra.run.dir={run}"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    tel, deadline = run / "telemetry.jsonl", time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if tel.exists() and any(r["event"] == "TRAIN_STEP" and r["step"] >= 2 for r in read(tel)):
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    rows = read(tel)
    asked = [r for r in rows if r["event"] == "CHECKPOINT" and r.get("reason") == "requested"]
    assert len(asked) == 1 and 2 <= asked[0]["step"] < 12, asked
    assert max(r["step"] for r in rows if r["event"] == "TRAIN_STEP") == 12
    assert (run / "checkpoints" / "last.ckpt").exists() and (run / "summary.json").exists()
