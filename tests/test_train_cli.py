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

from mens.telemetry import read

FAST = ["+hw=cpu", "logger=csv", "train.seq_len=256", "train.global_batch=4",
        "train.micro_batch=4", "curriculum=flat", "train.eval_max_records=4"]


def mens(*args, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.run([sys.executable, "-m", "mens", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_corrupt_jsonl_exits_2_naming_file_and_line(tmp_path):
    good = (Path(__file__).parent.parent / "mens/data/vox_lang/programs.jsonl").read_text()
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
    assert steps[-1] == 10 and json.loads((run / "summary.json").read_text())["steps"] == 10


def wandb_groups(run_dir: Path) -> set:
    """The group recorded in each offline wandb run file (read with wandb's own reader)."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    groups = set()
    for f in run_dir.glob("wandb/offline-run-*/run-*.wandb"):
        ds = datastore.DataStore()
        ds.open_for_scan(str(f))
        while (data := ds.scan_data()) is not None:
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(data)
            if rec.WhichOneof("record_type") == "run":
                groups.add(rec.run.run_group)
    return groups


def test_multirun_sweep_gives_each_job_a_run_dir_and_one_wandb_group(tmp_path):
    fast = [a for a in FAST if not a.startswith("logger=")] + ["train.eval_max_records=2"]
    res = mens("-m", "lane=lora,qlora", "spoke=vox_lang,mcp_tool_chain", *fast,
               "logger=wandb", "train.max_steps=1", "train.seq_len=128", cwd=tmp_path,
               timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    jobs = sorted(p.parent for p in tmp_path.glob("outputs/multirun/*/*/*/summary.json"))
    assert len(jobs) == 4
    seen = set()
    for job in jobs:
        assert json.loads((job / "outcome.json").read_text())["exit_code"] == 0
        summary = json.loads((job / "summary.json").read_text())
        seen.add((summary["lane"], summary["spoke"]))
    assert seen == {(l, s) for l in ("lora", "qlora") for s in ("vox_lang", "mcp_tool_chain")}
    groups = set().union(*(wandb_groups(j) for j in jobs))
    sweep = jobs[0].parent   # outputs/multirun/<date>/<time>: one group, named after it
    assert groups == {f"{sweep.parent.name}_{sweep.name}"}
