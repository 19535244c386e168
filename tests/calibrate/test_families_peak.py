"""Issue #40: the planned peak of the new families against the peak mens.calibrate measures (a
real LoRA training in its own child, as every calibration record is), on their tiny random
models. Packed families on the calibrated cpu/lora/nockpt/fp32 cell land within twice its
held-out error (one reading's own spread here is about that error); the block-mask ones
(Mixtral, gpt-oss: per-record attention refused) and those with linear-attention layers
(Qwen3.5: no cell has measured one) plan uncalibrated, with the uncalibrated margin, and stay
under it. Measured when written, measured minus the unmargined prediction over it (s 512, b 2):
qwen3_moe +1.0 to +4.6 %, phi3 −6.3 to +7.2 % (four readings), mixtral +1.4 %, gpt-oss −12 %
(−20 % at s 1024), qwen3_5 (s 128, b 4 and b 8) +0.7 to +6.6 %; dense qwen3 −2.8 to +0.7 %."""
from __future__ import annotations

import json

import pytest
from families_util import make_model, make_tokenizer

from mens.plan.memory import load_contract

CELL = "cpu/lora/nockpt/fp32"


def held_out_error(cell: str) -> float:
    """The largest |error| of the committed cell's held-out records (a fraction)."""
    rs = load_contract()["cells"][cell]["validation"]["records"]
    return max(abs(r["error_pct"]) for r in rs if r["status"] == "ok") / 100


@pytest.mark.slow   # a real training in a child per family (~40 s each on 2 cores)
@pytest.mark.parametrize("family, experts, calibrated, s, b", [
    ("qwen3_moe", True, True, 512, 2), ("phi3", False, True, 512, 2),
    ("gpt_oss", True, False, 512, 2),
    # rows of 128 are full (records are longer): padded, unpacked rows as long as the plan's
    ("qwen3_5_text", False, False, 128, 4)])
def test_measured_peak_lies_within_the_cells_error_of_the_plan(family, experts, calibrated, s,
                                                               b, tmp_path, mens_cli):
    hf = tmp_path / "hf"
    make_model(family, hf, len(make_tokenizer(family, hf)))
    p = mens_cli("mens.calibrate", "+hw=cpu", "logger=csv", "+rung=hf", f"rung.path={hf}",
                 "lane=lora", f"lane.lora.experts={str(experts).lower()}",
                 "calibrate.role=held_out", f"train.seq_len={s}", f"train.micro_batch={b}",
                 "data.tool_format=hermes", f"hydra.run.dir={tmp_path / 'run'}")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rec = json.loads((tmp_path / "run" / "calibration.json").read_text())
    assert rec["status"] == "ok" and rec["cell"] == CELL
    measured, pred = rec["measured_peak_bytes"], rec["predicted"]
    error = (measured - pred["raw_bytes"]) / pred["raw_bytes"]
    print(f"{family}: measured {measured / 2**20:.1f} MiB, planned {pred['raw_bytes'] / 2**20:.1f}"
          f" MiB (+ margin {pred['peak_bytes'] / 2**20:.1f}): {error * 100:+.1f} %")
    assert pred["calibrated"] == calibrated
    if calibrated:
        # one tiny-model reading moves several per cent between runs on a loaded 2-core box
        # (phi3 measured −6.3, −3.3, +0.4 and +7.2 %; the dense qwen3 −2.8 to +0.7 %), about
        # the cell's own held-out error (6.3 %): within twice that, and a miscounted family
        # (its experts or its fused projections left out: tens of per cent) still fails
        assert abs(error) <= 2 * held_out_error(CELL)
    else:                                                    # the plan's promise, margin included
        assert measured <= pred["peak_bytes"] and abs(error) <= pred["uncertainty"]
