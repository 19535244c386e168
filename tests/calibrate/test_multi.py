"""Calibration at several processes (issue #14 part 2): each rank meters its own training window,
a record's peak is one device's (the largest rank's), records of world_size > 1 fit cells of their
own (backend/lane/ckpt/precision/strategy) and leave the one-device cells exactly as they were;
the CUDA multi-device recipe composes into plannable jobs."""
from __future__ import annotations

import copy
import itertools
import json

import pytest

from mens.calibrate.fit import fit
from mens.calibrate.records import collect, record_components, term_columns
from mens.plan.memory import load_contract, with_uncertainty

MiB = 2**20
FAST = ["+hw=cpu", "hw.devices=2", "logger=csv", "curriculum=flat", "calibrate.eval_records=1",
        "rung.init=random", "calibrate.steps=2"]


@pytest.mark.slow   # two 2-process trainings: ~30 s each on an idle 2-core machine, more when shared
def test_a_two_process_sweep_records_each_devices_peak(tmp_path, mens_cli):
    p = mens_cli("mens.calibrate", "-m", "lane=lora,full", *FAST, "train.seq_len=512",
                 "train.micro_batch=2", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    recs = [json.loads((tmp_path / "sweep" / str(i) / "calibration.json").read_text())
            for i in (0, 1)]
    assert [r["cell"] for r in recs] == ["cpu/lora/nockpt/fp32/ddp", "cpu/full/nockpt/fp32/fsdp2"]
    for r in recs:
        assert r["status"] == "ok" and r["world_size"] == 2
        assert r["strategy"] == ("fsdp2" if r["lane"]["kind"] == "full" else "ddp")
        assert [x["rank"] for x in r["ranks"]] == [0, 1]
        for x in r["ranks"]:   # every rank measured its own window, each step
            assert x["window_complete"] and len(x["step_peaks_bytes"]) == 2
            assert all(0 < b < 2**30 for b in x["step_peaks_bytes"])
        # one device's peak: the largest rank's
        assert r["measured_peak_bytes"] == max(max(x["step_peaks_bytes"]) for x in r["ranks"])
        assert r["batch_shapes"] == [[2, 512], [2, 512]]      # per device: micro_batch rows
        assert r["predicted"]["components"]["communication"] > 0
        assert (tmp_path / "sweep" / str(recs.index(r)) / "measure.rank1.json").is_file()
    full = recs[1]
    m, pred = full["measured_peak_bytes"], full["predicted"]
    # the sharded full lane, per process: inside the plan's stated uncertainty of its prediction
    assert pred["peak_bytes"] >= m, (m / MiB, pred["peak_bytes"] / MiB)
    assert abs(m - pred["raw_bytes"]) <= pred["peak_bytes"] - pred["raw_bytes"], \
        (m / MiB, pred["raw_bytes"] / MiB, pred["uncertainty"])
    # the analytic per-device weights are sharded: half of one process's full-lane state
    assert full["predicted"]["components"]["weights"] == 0
    assert full["id"].split("-")[-2] == "fsdp2x2"


def _two_process_records(extra_mib: float) -> list[dict]:
    """The committed tiny full-lane records re-cast as 2-process fsdp2 ones whose peak is the
    analytic per-device model (fitted one-device coefficients on the state) + `extra_mib`: a
    known answer for the fit to recover."""
    contract = load_contract()
    recs, _ = collect(["calibration/cpu.jsonl"])
    recs = [r for r in recs if r.get("world_size", 1) == 1]   # the committed one-device ones
    one = fit(recs, contract)["cells"]["cpu/full/nockpt/fp32"]
    out = []
    for r in recs:
        if (r["cell"], r["rung"]["name"], r["status"], r["role"]) != \
                ("cpu/full/nockpt/fp32", "tiny", "ok", "fit"):
            continue
        m = copy.deepcopy(r)
        m.update(id=r["id"] + "-fsdp2x2", cell="cpu/full/nockpt/fp32/fsdp2", world_size=2,
                 strategy="fsdp2")
        cols = term_columns(record_components(m, contract))
        assert cols["communication"] > 0 and "communication" not in \
            term_columns(record_components(r, contract))
        coef = {t: one["terms"].get(t, {}).get("coefficient", 1.0) for t in cols}
        # logits move with the activations on one rung (the chunked loss's tiny-vocab chunks grow
        # with b·s): the fit holds them at the one-device coefficient, so the answer does too
        coef.update(activations=1.5)
        m["measured_peak_bytes"] = int(sum(cols[t] * coef[t] for t in cols) + extra_mib * MiB)
        out.append(m)
    return recs, out, one


def test_two_process_records_fit_their_own_cell_and_leave_one_device_cells_alone():
    recs, multi, one = _two_process_records(extra_mib=30)
    assert len(multi) >= 6
    contract = load_contract()
    alone, both = fit(recs, contract), fit(recs + multi, contract)
    for key, cell in alone["cells"].items():   # the one-device cells, exactly as before
        assert both["cells"][key] == cell, key
    cell = both["cells"]["cpu/full/nockpt/fp32/fsdp2"]
    # one rung: params and communication never vary, so they are held, not fitted
    assert "params" in cell["fixed"] and "communication" in cell["fixed"]
    assert cell["coefficients"]["weights"] == round(one["terms"]["params"]["coefficient"], 6)
    assert cell["coefficients"]["communication"] == 1.0
    assert abs(cell["terms"]["activations"]["coefficient"] - 1.5) < 0.01
    # the overhead takes the 30 MiB the analytic model does not know
    base = term_columns(record_components(multi[0], contract))["overhead"]
    assert abs(cell["terms"]["overhead"]["coefficient"] * base
               - (one["terms"]["overhead"]["coefficient"] * base + 30 * MiB)) < 2 * MiB
    for row in cell["records"]:
        assert abs(row["residual_pct"]) < 1.0
        p = row["fitted_bytes"]
        assert row["measured_bytes"] <= with_uncertainty(p, cell["uncertainty"],
                                                         cell["uncertainty_floor_bytes"])


def test_the_cuda_multi_recipe_composes_into_plannable_per_device_jobs():
    """Every hw.devices × lane of recipes/calib_cuda_multi.yaml composes (on an H200 tier here)
    and plans a per-device cell under the strategy calibration gives the lane."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from mens.calibrate.measure import prepare
    from mens.config.compose import default_overrides
    from mens.config.schema import register
    from mens.plan.spec import compile_run
    from mens.resources import CONF_DIR

    register()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        base = compose("mens", overrides=default_overrides(["+recipe=calib_cuda_multi"]),
                       return_hydra_config=True)
    params = base.hydra.sweeper.params
    devices = [int(d) for d in str(params["hw.devices"]).split(",")]
    assert devices == [2, 4, 8] and str(params["lane"]) == "lora,full"
    assert len(str(params["rung"]).split(",")) >= 3
    seen = set()
    for n, lane in itertools.product(devices, ("lora", "full")):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("mens", overrides=default_overrides(
                ["+recipe=calib_cuda_multi", "hw=h200", f"hw.devices={n}", f"lane={lane}",
                 "rung=8b"]))
        with open_dict(cfg):
            prepare(cfg)
        spec, plan = compile_run(cfg, "plan")
        strategy = "fsdp2" if lane == "full" else "ddp"
        assert (plan.world_size, plan.strategy) == (n, strategy)
        assert plan.cell == f"cuda/{lane}/nockpt/bf16/{strategy}"
        seen.add(plan.peak_bytes)
    assert len(seen) > 2   # per device: the sharded full lane shrinks with the device count


def test_calibration_refuses_several_nodes(compose):
    from mens.calibrate.measure import prepare
    from mens.errors import ConfigError

    cfg = compose(["+hw=h100", "hw.devices=4", "hw.nodes=2"])
    with pytest.raises(ConfigError) as e:
        prepare(cfg)
    assert "hw.nodes" in str(e.value)
