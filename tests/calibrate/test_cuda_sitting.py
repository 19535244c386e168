"""The committed CUDA sitting (calibration/cuda/2026-12-04_h200, an H200): its records load
through the fit's own reader, and every measured peak lies under the plan's promise and within
the analytic count (they over-predict 10-19 %; README beside them)."""
from __future__ import annotations

from pathlib import Path

from mens.calibrate.records import collect

SITTING = Path(__file__).resolve().parents[2] / "calibration" / "cuda" / "2026-12-04_h200"


def test_the_h200_sitting_loads_and_stays_under_its_promise():
    records, problems = collect([str(SITTING)])
    assert not problems
    ok = {r["cell"]: r for r in records if r["status"] == "ok"}
    assert set(ok) == {"cuda/lora/ckpt/bf16", "cuda/lora/nockpt/bf16", "cuda/full/ckpt/bf16",
                       "cuda/full/nockpt/bf16"}
    assert {r["cell"] for r in records if r["status"] == "failed"} == {
        "cuda/qlora/ckpt/bf16", "cuda/qlora/nockpt/bf16"}   # the Hub-kernels load, since fixed
    for r in ok.values():
        assert r["backend"] == "cuda" and r["precision"] == "bf16"
        assert r["measured_peak_bytes"] < r["predicted"]["raw_bytes"] < r["predicted_peak_bytes"]
