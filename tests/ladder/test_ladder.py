"""`mens ladder`: each cell's state derived from real run dirs and real plans (torch-free)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mens.data.corpus import corpus_lock
from mens.run.receipt import RECEIPT, artifact_sha256
from mens.ladder.state import ladder
from mens.resources import CORPORA


def run_copy(run: Path, dest: Path) -> Path:
    """A finished run dir's records and adapter (the shared tiny run stays untouched)."""
    dest.mkdir(parents=True)
    for name in ("spec.yaml", "summary.json", "plan.json", "telemetry.jsonl"):
        shutil.copy2(run / name, dest / name)
    shutil.copytree(run / "adapter", dest / "adapter")
    return dest


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty hub cache: every cache location mens looks in points into tmp_path."""
    hub = tmp_path / "hf" / "hub"
    hub.mkdir(parents=True)
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.setenv(var, str(hub))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return hub


def one(compose, root, rung, spoke="vox_lang", corpora=CORPORA, *over):
    cfg = compose(["+hw=cpu", "hw.memory_gb=24", f"ladder.runs={root}", *over])
    cells = ladder(cfg, [rung], [spoke], corpora)["cells"]
    assert len(cells) == 1
    return cells[0]


def test_corpus_changed_after_training_is_stale(tiny_run, tmp_path, compose):
    root = tmp_path / "runs"
    run = run_copy(tiny_run, root / "2026-12-01" / "10-00-00_train")
    corpora = tmp_path / "corpora"
    shutil.copytree(CORPORA / "vox_lang", corpora / "vox_lang")   # copy2: file times kept
    cell = one(compose, root, "tiny", corpora=corpora)
    assert cell["state"] == "TRAINED·UNGATED", cell["why"]
    assert cell["run"] == str(run) and cell["stale"] == []   # the re-planned peak is the same
    assert cell["measured_peak_bytes"] > 0 and cell["planned_peak_bytes"] > 0
    assert "gate.json" in cell["why"] and cell["gate"]["status"] == "none"

    # the run's spec.yaml records its corpus by content (data_lock): an edit makes it STALE
    programs = corpora / "vox_lang" / "programs.jsonl"
    lines, mtime = programs.read_text().splitlines(), programs.stat().st_mtime
    programs.write_text("\n".join(lines[1:]) + "\n")
    cell = one(compose, root, "tiny", corpora=corpora)
    assert cell["state"] == "STALE"
    assert "corpus vox_lang/programs.jsonl: changed (sha256" in cell["why"]
    assert "grammar_drills" not in cell["why"]

    # the corpus back as it was, and a receipt that passes and names these bytes: gated
    programs.write_text("\n".join(lines) + "\n")
    receipt = {"verdict": "pass", "reasons": [], "artifact_sha256": artifact_sha256(run),
               "corpus_lock": {"vox_lang": corpus_lock("vox_lang", corpora)}}
    (run / RECEIPT).write_text(json.dumps(receipt))
    cell = one(compose, root, "tiny", corpora=corpora)
    assert cell["state"] == "TRAINED+GATED", cell["why"]

    # a retrained (edited) adapter voids the receipt
    with open(run / "adapter" / "adapter_model.safetensors", "ab") as f:
        f.write(b"\0")
    cell = one(compose, root, "tiny", corpora=corpora)
    assert cell["state"] == "TRAINED·UNGATED" and cell["gate"]["status"] == "void"
    assert "retrained or edited" in cell["why"]

    # a run from an earlier mens recorded no corpus digest: file times against its start
    (run / RECEIPT).unlink()
    spec = yaml.safe_load((run / "spec.yaml").read_text())
    spec["data_lock"] = []
    (run / "spec.yaml").write_text(yaml.safe_dump(spec))
    os.utime(programs, (mtime, mtime))                       # as the clone left it
    assert one(compose, root, "tiny", corpora=corpora)["stale"] == []
    programs.write_text("\n".join(lines[1:]) + "\n")
    cell = one(compose, root, "tiny", corpora=corpora)
    assert cell["state"] == "STALE" and "file time" in cell["why"]


def test_absent_weights_and_a_cached_snapshot(tmp_path, compose, cache):
    cell = one(compose, tmp_path / "none", "0.6b")
    assert cell["state"] == "BASE_SNAPSHOT_ABSENT" and cell["plan_fits"] is True
    assert "Qwen/Qwen3-0.6B" in cell["why"] and cell["revision"] == "unpinned"
    # the hub cache layout with the weights in it: the cell is ready to train
    repo = cache / "models--Qwen--Qwen3-0.6B"
    snap = repo / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    (snap / "config.json").write_text("{}")
    (snap / "model.safetensors").write_bytes(b"x" * 64)
    cell = one(compose, tmp_path / "none", "0.6b")
    assert cell["state"] == "TRAIN_NOT_RUN" and cell["base_present"] is True


def test_a_big_rung_on_small_memory_does_not_fit(tmp_path, compose, cache):
    cell = one(compose, tmp_path / "none", "8b", "vox_lang", CORPORA, "hw.memory_gb=2")
    assert cell["state"] == "DOES_NOT_FIT_LOCAL" and cell["plan_fits"] is False
    assert "GiB" in cell["why"] and cell["plan_peak_bytes"] > cell["budget_bytes"]
    assert one(compose, tmp_path / "none", "tiny")["state"] == "TRAIN_NOT_RUN"


def test_cli_writes_ladder_json_without_torch(tmp_path):
    code = ("import sys; from mens.cli import main; "
            f"rc = main(['ladder', '+hw=cpu', 'hw.memory_gb=24', 'ladder.runs={tmp_path}/none', "
            f"'hydra.run.dir={tmp_path}/out']); "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules; sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    data = json.loads((tmp_path / "out" / "ladder.json").read_text())
    assert len(data["cells"]) == len(data["rungs"]) * len(data["spokes"]) >= 7 * 8
    by = {(c["rung"], c["spoke"]): c["state"] for c in data["cells"]}
    assert by[("tiny", "vox_lang")] == "TRAIN_NOT_RUN" and by[("32b", "vox_lang")] == "DOES_NOT_FIT_LOCAL"
    assert "TRAIN_NOT_RUN" in p.stdout or "not run" in p.stdout


def test_gated_cell_badge_shows_the_gain_and_its_interval(tiny_run, tmp_path, compose):
    """The receipt mens gate writes (gate.json with the gated metric row): a pass shows the
    in-domain gain with its interval on the cell, a fail its first reason."""
    from eval_util import rows_a, write_gate
    from mens.ladder.state import render

    root = tmp_path / "runs"
    run = run_copy(tiny_run, root / "2026-12-01" / "10-00-00_train")
    row = rows_a()[0]
    write_gate(run, row)
    result = ladder(compose(["+hw=cpu", "hw.memory_gb=24", f"ladder.runs={root}"]),
                    ["tiny"], ["vox_lang"])
    [cell] = result["cells"]
    g = row["gain"]
    lo, hi = (f"{100 * x:+.1f}" for x in g["ci"])
    want = f"pass@1 gain {100 * g['value']:+.1f} [{lo}, {hi}] pts"
    assert cell["state"] == "TRAINED+GATED", cell["why"]
    assert cell["gate"]["badge"] == want and cell["gate"]["in_domain"] == row
    assert g["ci"][0] > 0                      # 6/20 → 14/20: a gain the interval supports
    assert f"pass: pass@1 gain {100 * g['value']:+.1f} [{lo}," in render(result)  # rich wraps

    write_gate(run, row, verdict="fail", reasons=["pass@1 gain below gate.min_gain 0.5",
                                                  "guard arc_easy/acc dropped"])
    [cell] = ladder(compose(["+hw=cpu", "hw.memory_gb=24", f"ladder.runs={root}"]),
                    ["tiny"], ["vox_lang"])["cells"]
    assert cell["state"] == "TRAINED·UNGATED" and cell["gate"]["status"] == "fail"
    assert cell["gate"]["badge"] == "gate failed: pass@1 gain below gate.min_gain 0.5"
