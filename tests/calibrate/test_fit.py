"""mens.fit: least squares per cell, refusals of under-determined cells, the contract it writes,
the report, and the committed CPU cells re-derived from their committed records."""
from __future__ import annotations

import json
import random
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from mens.calibrate.fit import (Underdetermined, collect, fit, fit_cell, record_components,
                                repeat_noise, term_columns)
from mens.calibrate.refit import write_contract
from mens.plan.memory import (CONTRACT_PATH, Arch, LaneModel, contract_paths, load_contract,
                              usable_cell)

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "calibration" / "cpu.jsonl"
TINY = Arch(256, 768, 4, 4, 2, 64, 4096, True)
Q06 = Arch(1024, 3072, 28, 16, 8, 128, 151936, True)
Q06_L8 = replace(Q06, layers=8)
TRUE = {"params": 1.05, "activations": 1.6, "large_activations": 1.0, "checkpoints": 1.0,
        "logits": 1.1,
        "packing_mask": 1.0, "retention": 1.0,
        "overhead": 0.5}


def record(arch: Arch, rung: str, kind="lora", ckpt=False, s=256, b=1, measured=None,
           noise=0.0, rng=random.Random(0), **extra) -> dict:
    """A record as mens.calibrate writes it; `measured` defaults to the model's components times
    the TRUE coefficients, with relative noise."""
    lane = LaneModel(kind, "fp32")
    r = {"id": f"{rung}-{kind}-{ckpt}-s{s}-b{b}-{rng.random():.6f}", "role": "fit",
         "status": "ok", "reason": None,
         "cell": f"cpu/{kind}/{'ckpt' if ckpt else 'nockpt'}/fp32", "backend": "cpu",
         "lane": asdict(lane), "checkpointing": ckpt, "precision": "fp32",
         "rung": {"name": rung, "init": "random"}, "arch": asdict(arch),
         "params": arch.params()["total"], "seq_len": s, "micro_batch": b, "packing": True,
         "paths": contract_paths(load_contract()), "host": {"hostname": "test"}, "versions": {},
         **extra}
    if measured is None:
        cols = term_columns(record_components(r, load_contract()))
        measured = sum(TRUE[t] * v for t, v in cols.items()) * (1 + rng.gauss(0, noise))
    r["measured_peak_bytes"] = int(measured)
    return r


def grid(kind="lora", ckpt=False, noise=0.0):
    out = []
    for arch, name in ((TINY, "tiny"), (Q06_L8, "0.6b-l8"), (Q06, "0.6b")):
        for s in (128, 256, 512):
            out.append(record(arch, name, kind, ckpt, s, 1, noise=noise))
        out.append(record(arch, name, kind, ckpt, 256, 2, noise=noise))
    return out


def test_fit_recovers_known_coefficients():
    cell = fit_cell("cpu/lora/nockpt/fp32", grid(noise=0.005), load_contract())
    for term in ("params", "activations", "logits"):
        got = cell["terms"][term]
        assert abs(got["coefficient"] - TRUE[term]) <= max(got["uncertainty"], 0.03), term
    assert cell["calibrated"] and cell["uncertainty"] <= 0.05
    assert "packing_mask" in cell["fixed"]                       # too small to determine
    assert all(abs(r["residual_pct"]) < 3 for r in cell["records"])


def test_repeated_shapes_set_a_floor_under_the_uncertainty():
    """Runs of one shape that differ by 8 % mean no cell may claim ±2 %: the fit's
    uncertainty is at least 2σ of repeated measurements (pooled per backend)."""
    recs = grid()
    big = [r for r in recs if r["measured_peak_bytes"] >= 512 * 2**20][:3]
    twins = [dict(r, id=r["id"] + "-again", measured_peak_bytes=int(r["measured_peak_bytes"] * 1.08))
             for r in big]
    noise = repeat_noise(recs + twins)["cpu"]
    assert (noise["shapes"], noise["records"]) == (3, 6)
    assert noise["sigma"] == pytest.approx(0.04 / 1.04 * 2**0.5, rel=1e-3)   # ±3.85 % per pair
    assert fit(recs, load_contract())["cells"]["cpu/lora/nockpt/fp32"]["uncertainty"] < 0.03
    cell = fit(recs + twins, load_contract())["cells"]["cpu/lora/nockpt/fp32"]
    assert cell["uncertainty"] >= 2 * noise["sigma"] and not cell["calibrated"]


def test_a_held_out_miss_uncalibrates_the_cell_but_keeps_its_fit():
    """Held-out records never enter a fit; one the fitted cell misses by more than its
    uncertainty takes the `calibrated` label away. The planner then still uses the fitted
    coefficients (the best estimate) but under the uncalibrated margin, and says so."""
    from mens.plan.memory import predict
    recs = grid(noise=0.005)
    good = record(Q06, "0.6b", s=1024, role="held_out", noise=0.005)
    c = load_contract()
    cell = fit(recs + [good], c)["cells"]["cpu/lora/nockpt/fp32"]
    assert cell["calibrated"] and cell["validation"]["passed"]
    bad = dict(good, id="miss", measured_peak_bytes=int(good["measured_peak_bytes"] * 1.2))
    cell = fit(recs + [good, bad], c)["cells"]["cpu/lora/nockpt/fp32"]
    assert not cell["calibrated"] and cell["validation"]["passed"] is False
    assert any("held out: miss measured" in w for w in cell["not_calibrated"])
    comps = record_components(good, c)
    fitted, raw = predict(comps, cell, 0.25), predict(comps, None, 0.25)
    assert not fitted["calibrated"] and fitted["fitted"] and fitted["uncertainty"] == 0.25
    assert fitted["raw_bytes"] != raw["raw_bytes"]           # the coefficients still apply


def test_a_single_rung_cannot_fit_weight_terms():
    recs = [r for r in grid() if r["rung"]["name"] == "0.6b"]
    recs += [record(Q06, "0.6b", s=s, b=2) for s in (128, 512)]
    with pytest.raises(Underdetermined) as e:
        fit_cell("cpu/lora/nockpt/fp32", recs, load_contract())
    msg = str(e.value)
    assert "cpu/lora/nockpt/fp32" in msg and "`params`" in msg and "another rung" in msg


def test_too_few_records_are_refused_by_name():
    with pytest.raises(Underdetermined, match=r"cpu/full/ckpt/fp32: 3 record\(s\) for 4 "
                                              r"coefficients.*at least 5"):
        fit_cell("cpu/full/ckpt/fp32", grid("full", True)[:3], load_contract())


def test_refusals_and_exclusions_are_listed_never_dropped():
    recs = grid()
    recs += [record(TINY, "tiny", "full", s=s) for s in (128, 256)]          # too few: refused
    recs.append(record(Q06, "0.6b", s=2048, role="held_out"))
    recs.append(record(Q06, "0.6b", s=4096, status="lower_bound",
                       reason="killed by the calibrate.max_rss_gb guard"))
    recs.append(record(Q06, "0.6b", s=8192, status="skipped", measured=0, reason="too big"))
    result = fit(recs, load_contract())
    assert set(result["cells"]) == {"cpu/lora/nockpt/fp32"}
    assert "cpu/full/nockpt/fp32" in result["refused"]
    used = sum(len(c["records"]) for c in result["cells"].values())
    assert used + len(result["excluded"]) + 2 == len(recs)           # the 2 refused records
    reasons = {x["id"].split("-")[3]: x["reason"] for x in result["excluded"]}
    assert reasons["s2048"].startswith("held out")
    assert reasons["s4096"].startswith("lower bound only") and "fitted prediction" in reasons["s4096"]
    assert reasons["s8192"].startswith("not run")


def test_written_contract_keeps_the_model_and_is_used_by_the_planner(tmp_path):
    path = tmp_path / "contract.yaml"
    shutil.copy(CONTRACT_PATH, path)
    result = fit(grid(noise=0.005), load_contract(str(path)))
    write_contract(path, result["cells"])
    text = path.read_text()
    assert text.startswith(CONTRACT_PATH.read_text().partition("\ncells:")[0])   # comments kept
    c = load_contract(str(path))
    cell = usable_cell(c, "cpu/lora/nockpt/fp32")
    assert cell and cell["records"] and cell["calibrated"]
    stale = {**c, "model": {**c["model"], "ckpt_hidden": 2}}   # another model: the fit is stale
    assert usable_cell(stale, "cpu/lora/nockpt/fp32") is None


def test_fit_cli_refuses_an_underdetermined_cell(tmp_path, mens_cli):
    recs = tmp_path / "recs.jsonl"
    recs.write_text("".join(json.dumps(r) + "\n" for r in grid()[:3]))
    contract = tmp_path / "contract.yaml"
    shutil.copy(CONTRACT_PATH, contract)
    p = mens_cli("mens.fit", f"calibrate.records=[{recs}]", f"calibrate.out={contract}",
                 f"hydra.run.dir={tmp_path / 'run'}")
    assert p.returncode == 2, p.stderr
    assert "refused: cell cpu/lora/nockpt/fp32: 3 record(s) for 4 coefficients" in p.stderr
    assert (tmp_path / "run" / "fit_report.md").is_file()


def test_report_has_both_rules_and_a_scatter(tmp_path):
    from mens.calibrate.report import report
    recs = grid(noise=0.005) + [record(Q06, "0.6b", s=1024, role="held_out", noise=0.005)]
    c = load_contract()
    result = fit(recs, c)
    fitted = {**c, "cells": result["cells"]}
    out = report(recs, fitted, result, tmp_path)
    text = (tmp_path / "fit_report.md").read_text()
    assert "accelerate (4× model, Adam)" in text and "LLaMA-Factory table" in text
    assert (tmp_path / "fit_scatter.png").stat().st_size > 10_000
    assert out["held_out"]["records"] == 1 and out["held_out"]["accepted"]


# --- the committed CPU cells --------------------------------------------------------------
def committed():
    recs, problems = collect([str(RECORDS)])
    assert not problems
    return recs, load_contract()


# What the committed records showed (calibration/report/fit_report.md): the two adapter cells
# without checkpointing earn the label; the others keep their fit under the uncalibrated margin
# (a held-out shape missed, or leave-one-out errors too large) — each with its reason.
CALIBRATED_CPU_CELLS = {"cpu/lora/nockpt/fp32", "cpu/qlora/nockpt/fp32"}


def test_committed_cells_are_rederived_from_committed_records():
    recs, c = committed()
    result = fit(recs, c)
    for lane in ("lora", "qlora", "full"):
        for ckpt in ("ckpt", "nockpt"):
            key = f"cpu/{lane}/{ckpt}/fp32"
            old, new = c["cells"][key], result["cells"][key]
            assert usable_cell(c, key), f"{key} is stale: refit with `make fit`"
            assert old["calibrated"] == new["calibrated"], key
            assert old["calibrated"] == (key in CALIBRATED_CPU_CELLS), key
            assert old["calibrated"] or old["not_calibrated"], key  # never without a reason
            for t, term in old["terms"].items():
                assert abs(new["terms"][t]["coefficient"] - term["coefficient"]) <= \
                    term["uncertainty"], (key, t)
            assert {r["id"] for r in old["records"]} == {r["id"] for r in new["records"]}


# The objectives' own cells (issue #28): fitted from recipes/calib_cpu_dpo.yaml and
# calib_cpu_grpo.yaml, held out by calib_cpu_objectives_heldout.yaml
OBJECTIVE_CELLS = ("cpu/lora-dpo/nockpt/fp32", "cpu/lora-grpo/nockpt/fp32")


def test_committed_objective_cells_and_their_held_out_shapes():
    """DPO's and GRPO's cells are what their committed records fit, and each one's held-out
    shape (a micro-batch of 3, beyond the fitted 1 and 2) is within the committed prediction +
    its stated uncertainty."""
    from mens.plan.memory import min_margin, predict

    recs, c = committed()
    result = fit(recs, c)
    for key in OBJECTIVE_CELLS:
        old, new = usable_cell(c, key), result["cells"][key]
        assert old, f"{key} is missing or stale: refit with `make fit`"
        assert old["calibrated"] == new["calibrated"] and (old["calibrated"] or
                                                           old["not_calibrated"]), key
        for t, term in old["terms"].items():
            assert abs(new["terms"][t]["coefficient"] - term["coefficient"]) <= \
                term["uncertainty"], (key, t)
    held = [r for r in recs if r["role"] == "held_out" and r["cell"] in OBJECTIVE_CELLS]
    assert sorted(r["cell"] for r in held) == sorted(OBJECTIVE_CELLS)
    for r in held:   # a micro-batch beyond any fitted (its rows as long as the fit's or longer)
        fitted = [x for x in recs if x["cell"] == r["cell"] and x["role"] == "fit"]
        assert r["micro_batch"] > max(x["micro_batch"] for x in fitted)
        assert r["seq_len"] >= max(x["seq_len"] for x in fitted)
        pred = predict(record_components(r, c), usable_cell(c, r["cell"]), min_margin(c))
        assert r["measured_peak_bytes"] <= pred["peak_bytes"], (r["id"], pred)


def test_committed_held_out_records():
    """The acceptance on shapes the fit never saw (seq_len 2x the fitted range, a rung and an
    architecture not in the fit): calibrated cells within 10 % (64 MiB below 512 MiB), the
    median within 5 %, nothing above prediction + stated uncertainty, and far closer than
    either rule of thumb. Uncalibrated cells' misses are in the report, under their label."""
    from mens.calibrate.report import held_out_table, rows, summary
    from mens.calibrate.rules import RULES
    recs, c = committed()
    s = held_out_table(str(RECORDS))
    assert s["records"] >= 10 and s["big"] >= 4
    fit_rungs = {r["rung"]["name"] for r in recs if r["role"] == "fit"}
    assert {r["rung"]["name"] for r in recs if r["role"] == "held_out"} - fit_rungs
    assert s["mens"]["median_pct"] <= 5.0 and not s["exceeding"], s
    for name in RULES:
        assert s[name]["median_pct"] > 5 * s["mens"]["median_pct"], name
    calibrated = summary([r for r in rows(recs, c) if r["role"] == "held_out" and r["calibrated"]])
    assert calibrated["big"] >= 4 and calibrated["accepted"], calibrated


def test_records_of_other_training_paths_are_counted_never_fitted():
    """A record measured on other training paths than the contract's (here the 4-D mask, full
    logits and glibc's own heap, the paths before issue #13; a record without `paths` predates
    them) cannot fit or test its cells: it is excluded, with the paths named."""
    recs = grid()
    classic = record(Q06, "0.6b", s=1024)
    classic["id"] += "-classic"
    del classic["paths"]
    result = fit(recs + [classic], load_contract())
    (x,) = [x for x in result["excluded"] if x["id"] == classic["id"]]
    assert "other training paths" in x["reason"] and "attention=block_mask" in x["reason"]
    assert len(result["cells"]["cpu/lora/nockpt/fp32"]["records"]) == len(recs)


def test_the_fixed_heap_splits_activations_by_the_hidden_size_tensors():
    """Under train.heap=fixed the CPU records grow by ~2× the saved bytes while the (b·s, h)
    tensors are heap-sized, mmapped or not, and by ~1× once they reach the 8 MiB threshold
    (0.6b-l8 at s=2048): the whole set is `activations` below, `large_activations` from there —
    not tensor by tensor, as under the default heap's adaptive threshold."""
    from mens.plan.memory import Shape, components
    c = load_contract()
    threshold = c["model"]["fixed_heap_mmap_mib"] * 2**20     # 8 MiB, the contract's
    lane = LaneModel("lora", "fp32")
    per = {"attention": "per_record", "loss": "chunked"}
    for s, heap_sized in ((512, True), (2048, False)):      # b·s·h·4 = 4 MiB / 16 MiB
        shape = Shape(s, 2, False, True)
        assert (2 * s * Q06_L8.hidden * 4 < threshold) == heap_sized
        fixed = components(Q06_L8, lane, shape, "cpu", c, {**per, "heap": "fixed"})
        default = components(Q06_L8, lane, shape, "cpu", c, {**per, "heap": "default"})
        total = default["activations"] + default["large_activations"]
        split = (total, 0) if heap_sized else (0, total)
        assert (fixed["activations"], fixed["large_activations"]) == split, s
    assert default["large_activations"] > 0     # s=2048: the default heap splits per tensor
