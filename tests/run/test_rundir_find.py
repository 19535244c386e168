"""RunDir.find / RunDir.latest — the one run lookup compare, the ladder, the studio and `mens
demo` share — on a runs folder of every kind: finished and started runs, a calibration record,
a sweep job, a deep dir, a base evaluated alone. Each caller's choice is a parameter."""
from __future__ import annotations

import os

from mens.run.rundir import RunDir


def _mk(root, rel, *files, mtime=None):
    run = root / rel
    run.mkdir(parents=True)
    for f in files:
        if f == "adapter/":
            (run / "adapter").mkdir()
            (run / "adapter" / "adapter_config.json").write_text("{}")
        else:
            (run / f).write_text("{}")
            if mtime is not None:
                os.utime(run / f, (mtime, mtime))
    return run


def test_find_and_latest(tmp_path):
    done = ("telemetry.jsonl", "summary.json", "spec.yaml", "adapter/")
    a = _mk(tmp_path, "2026-01-01/10-00-00_train", *done, mtime=100)
    b = _mk(tmp_path, "2026-01-02/09-00-00_train", *done, mtime=200)
    cal = _mk(tmp_path, "2026-01-02/11-00-00_cal", *done, "calibration.json", mtime=300)
    job = _mk(tmp_path, "2026-01-03/sweep/0", "telemetry.jsonl", mtime=400)
    deep = _mk(tmp_path, "a/b/c/d", "telemetry.jsonl", "summary.json", "spec.yaml", mtime=50)
    ev = _mk(tmp_path, "2026-01-04/x_eval", "eval.json")

    # the ladder: finished runs (summary.json + spec.yaml) at any depth, by path
    assert RunDir.find(tmp_path, marker=RunDir.SUMMARY,
                       where=lambda rd: rd.spec.is_file()) == [a, b, deep]
    # the studio: started runs one to three levels down, newest first, calibration left out
    assert RunDir.find(tmp_path, depths=(1, 2, 3), newest=True) == [job, b, a]
    assert RunDir.find(tmp_path, depths=(1, 2, 3), newest=True, limit=1) == [job]
    assert RunDir.find(tmp_path, marker="eval.json", depths=(1, 2, 3)) == [ev]
    # compare: a named run is itself; a folder, every run below it, calibration included
    assert RunDir.find(a, itself=True) == [a]
    assert RunDir.find(tmp_path / "2026-01-02", itself=True, calibration=True) == [b, cal]
    assert RunDir.find(tmp_path / "nowhere") == [] and RunDir.latest(tmp_path / "nowhere") is None
    # demo: the newest servable run at <date>/<time>/
    assert RunDir.latest(tmp_path, marker=RunDir.SUMMARY, depths=(2,),
                         where=lambda rd: rd.artifact_kind == RunDir.ADAPTER) == b
