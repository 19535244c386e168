"""Published measurements as calibration evidence (#26): the shipped rows read and cite their
sources, the CUDA cells the contract carries are what they fit, and leave-one-source-out
validation cannot see the source it tests."""
from __future__ import annotations

import copy
import json
import statistics

import pytest

from mens.calibrate.evidence import to_record
from mens.calibrate.external import fit_external, framework_key
from mens.calibrate.records import collect
from mens.errors import DataError
from mens.plan.memory import GiB, load_contract, min_margin


@pytest.fixture(scope="module")
def shipped():
    recs, problems = collect(["calibration/external"])
    assert not problems, problems
    return recs


@pytest.fixture(scope="module")
def fitted(shipped):
    return fit_external(copy.deepcopy(shipped), load_contract(), min_margin())


def test_rows_are_sourced_measurements_spanning_what_users_train(shipped):
    assert len(shipped) >= 30 and len({r["source"] for r in shipped}) >= 5
    assert all(r["kind"] == "external" and r["url"].startswith("https://") for r in shipped)
    ok = [r for r in shipped if r["status"] == "ok"]
    assert {r["lane"]["kind"] for r in shipped} == {"lora", "qlora", "full"}
    mem = [r["gpu_memory_gb"] for r in shipped if r.get("gpu_memory_gb")]
    assert min(mem) <= 24 and max(mem) >= 80
    params = sorted(r["arch"]["layers"] * r["arch"]["hidden"] ** 2 * 12 for r in shipped)
    assert params[0] < 1.5e9 and params[-1] > 60e9                   # ~1B … 70B-class
    assert len(ok) >= 30
    for r in shipped:   # every row left out of the memory fit says why
        assert r["status"] == "ok" or r["reason"], r["id"]


def test_units_and_scopes_are_read_as_stated(shipped):
    byid = {r["id"]: r for r in shipped}
    assert byid["torchtune-readme-llama3.1-8b-lora-rtx4090"]["measured_peak_bytes"] == \
        int(16.2 * GiB)
    row = json.loads(next(line for line in open("calibration/external/torchtune-docs.jsonl")
                          if "lora-qv-r8" in line))
    assert to_record(row, "x:1")["measured_peak_bytes"] == int(15.57e9)    # "GB" = 10⁹
    row["measured"]["peak_unit"] = "GiB"
    assert to_record(row, "x:1")["measured_peak_bytes"] == int(15.57 * GiB)
    row["hardware"]["devices"], row["config"]["strategy"] = 4, "fsdp"
    rec = to_record(row, "x:1")
    assert rec["status"] == "skipped" and "shard" in rec["reason"]


def test_a_malformed_row_names_its_file_and_line(tmp_path):
    good = open("calibration/external/torchtune-readme.jsonl").readline()
    bad = json.loads(good)
    del bad["model"]["hidden"]
    f = tmp_path / "x.jsonl"
    f.write_text(good + json.dumps(bad) + "\n")
    with pytest.raises(DataError) as e:
        collect([str(f)])
    assert f"{f}:2" in e.value.message and "hidden" in e.value.message


def test_frameworks_are_keyed_by_stack():
    assert framework_key("transformers Trainer + peft (+ DeepSpeed)") == "mens-like"
    assert framework_key("ms-swift (swift sft; transformers Trainer)") == "mens-like"
    assert framework_key("lit-gpt") == framework_key("litgpt") == "litgpt"
    assert framework_key("torchtune") == "torchtune"


def test_what_is_left_out_is_said(shipped, fitted):
    why = {r["id"]: r.get("reason") or "" for r in shipped}
    assert "full fine-tune" in why["torchtune-readme-llama3.1-8b-full-rtx4090"]
    assert "mapped to family" in why["qwen-readme-qwen-7b-lora-a100-80g-x1-s2048"]
    # what measured peaks decide is the fit's screens, never the reading of a row
    scr = fitted["screened"]
    assert scr["torchtune-readme-llama3.1-8b-lora-a6000"][0] == "not_binding"   # larger card
    assert "allocator kept" in scr["torchtune-readme-llama3.1-8b-lora-a6000"][1]
    assert scr["torchtune-docs-llama2-7b-qlora-r8"][0] == "load_reading"
    assert "loading" in scr["torchtune-docs-llama2-7b-qlora-r8"][1]
    assert why["torchtune-readme-llama3.1-8b-lora-a6000"] == ""   # ok as read: a screen's call


def test_a_series_whose_config_does_not_describe_what_ran_is_left_out(fitted, shipped):
    bad = fitted["inconsistent"]
    assert any(k.startswith("ms-swift-benchmark / 01-ai/Yi-6B") for k in bad), bad
    assert not any(k.startswith("torchtune") for k in bad)


def test_the_committed_cuda_cells_are_what_the_evidence_fits(fitted):
    cells = load_contract()["cells"]
    for key, cell in fitted["cells"].items():
        assert cells[key]["external"] == cell["external"]
        assert cells[key]["uncertainty"] == cell["uncertainty"]
        assert cells[key]["coefficients"] == pytest.approx(cell["coefficients"], abs=1e-5)
    # the cells users train in, at bf16 with LoRA and checkpointed QLoRA, stand on published
    # evidence (QLoRA since axolotl's Llama-2 row is modelled with the fp32 its framework cast
    # the unquantized weights to: it sat 35 % above its held-out prediction before); QLoRA
    # without checkpointing does not (LitGPT's rows alone, up to 59 % above prediction)
    for key in ("cuda/lora/ckpt/bf16", "cuda/lora/nockpt/bf16", "cuda/qlora/ckpt/bf16"):
        c = fitted["cells"][key]
        assert c["external"] and len(c["sources"]) >= 2 and c["uncertainty"] < 0.25, key
    c = fitted["cells"]["cuda/qlora/nockpt/bf16"]
    assert not c["external"] and c["uncertainty"] >= c["heldout"]["worst_under_prediction_pct"] / 100
    for key in ("cuda/lora/ckpt/bf16", "cuda/lora/nockpt/bf16",   # issue #26's targets
                "cuda/qlora/ckpt/bf16"):
        h = fitted["cells"][key]["heldout"]
        assert h["median_abs_pct"] <= 10 and h["max_abs_pct"] <= 20, (key, h)


def test_leave_one_source_out_cannot_see_the_source_it_tests(shipped):
    """A copy of one source's records read 15 % higher, as a source of its own: held out it is
    predicted from the others, so it misses by about the 15 % its own rows would have taught.
    (In-sample it misses about as much: the prior chosen by leave-one-source-out holds the
    coefficients near the analytic 1, so no source's quirk is learnt; that the held-out
    predictions never see their source is test_screens_and_prior_are_decided_without_….)"""
    ok = [r for r in shipped if r["status"] == "ok"]
    base = [r for r in ok if r["source"] == "torchtune-readme"]
    fake = [dict(copy.deepcopy(r), id=r["id"] + "-x", source="fake", framework="transformers",
                 measured_peak_bytes=int(r["measured_peak_bytes"] * 1.15)) for r in base]
    out = fit_external(copy.deepcopy(ok) + fake, load_contract(), min_margin())
    held = [x["heldout_pct"] for x in out["rows"] if x["source"] == "fake"]
    assert held and min(held) > 3 and sum(held) / len(held) > 10, held   # held out: it shows


def test_mens_own_cuda_records_outrank_published_ones(shipped):
    """Records of `make calibrate-gpu` (mens's own measurements on a CUDA device) fit their
    cell as measured cells do; the published rows of that cell then only check it."""
    from mens.calibrate.fit import fit
    from mens.calibrate.records import predicted_raw
    from mens.plan.memory import LORA_TARGETS

    contract = load_contract()
    own = []
    for name, arch in (("0.6b", dict(hidden=1024, intermediate=3072, layers=28, heads=16,
                                     kv_heads=8, head_dim=128, vocab=151936, tied=True)),
                       ("1.7b", dict(hidden=2048, intermediate=6144, layers=28, heads=16,
                                     kv_heads=8, head_dim=128, vocab=151936, tied=True)),
                       ("4b", dict(hidden=2560, intermediate=9728, layers=36, heads=32,
                                   kv_heads=8, head_dim=128, vocab=151936, tied=True))):
        for s, b in ((512, 1), (1024, 1), (1024, 2), (2048, 1), (2048, 2)):
            r = {"id": f"{name}-{s}-{b}", "cell": "cuda/lora/ckpt/bf16", "backend": "cuda",
                 "arch": {**arch, "family": "qwen3"}, "rung": {"name": name},
                 "lane": {"kind": "lora", "precision": "bf16", "optimizer": "adamw",
                          "lora_r": 16, "lora_targets": list(LORA_TARGETS),
                          "lora_dropout": 0.0, "double_quant": True, "blocksize": 64,
                          "frozen_adapter_copy": False},
                 "seq_len": s, "micro_batch": b, "checkpointing": True, "packing": True,
                 "paths": dict(contract["paths"]), "precision": "bf16", "status": "ok",
                 "role": "fit", "host": {"hostname": "gpu"}, "versions": {}}
            # what a device would read: the analytic sum and 300 MiB of its own (the test's
            # stand-in for a CUDA measurement, which cannot be made here)
            r["measured_peak_bytes"] = predicted_raw(r, None, contract) + 300 * 2**20
            own.append(r)
    out = fit(own + copy.deepcopy(shipped), contract)
    assert not out["refused"], out["refused"]
    cell = out["cells"]["cuda/lora/ckpt/bf16"]
    assert not cell.get("external") and cell["fitted"]["n_records"] == len(own)
    assert cell["external_check"]["sources"] and "records" in cell["external_check"]
    assert out["cells"]["cuda/lora/nockpt/bf16"]["external"]     # the others stay published


def test_every_screened_held_out_record_is_under_its_cells_margin(fitted):
    """The margin is the worst held-out under-prediction of the cell's screened rows, not a
    percentile: no published peak nobody fitted on lies above prediction + margin; the rows the
    screens set aside are counted beside it, each with the screen that set it aside."""
    rows = fitted["rows"]
    for key, c in fitted["cells"].items():
        mine = [x for x in rows if x["cell"] == key]
        kept = [x["heldout_pct"] for x in mine if not x["screen"] and x["heldout_pct"] is not None]
        assert kept and max(kept) <= 100 * c["uncertainty"], (key, max(kept), c["uncertainty"])
        every = c["heldout"]["all_rows"]
        assert every["records"] == sum(x["heldout_pct"] is not None for x in mine)
        assert every["covered"] + len(every["not_covered"]) == every["records"]
        assert all(x["screen"] and x["heldout_pct"] > 100 * c["uncertainty"]
                   for x in every["not_covered"]), key
    assert fitted["cells"]["cuda/lora/ckpt/bf16"]["heldout"]["all_rows"]["not_covered"]


def test_screens_and_prior_are_decided_without_the_held_out_source(shipped, fitted):
    """Every row a fit could read is predicted held out — those its screens set aside too —
    and a source's held-out predictions do not move when its own readings do: the screens,
    the prior and the coefficients of its fold never saw them. Inflating its peaks 3× makes
    its rows `inconsistent` in the joint fit, and the all-rows errors show the miss."""
    ok = [r for r in shipped if r["status"] == "ok"]
    out = fitted
    assert len(out["rows"]) == len(ok) and out["counts"]["modelled"] == len(ok)
    assert out["counts"]["published"] == len(shipped)
    assert out["counts"]["fitted"] == len(ok) - len(out["screened"]) < len(ok)
    assert all(x["heldout_pct"] is not None for x in out["rows"] if x["screen"])
    assert set(out["folds"]) == {r["source"] for r in ok}   # each source held out once
    src = "hf-peft-metamathqa"
    moved = [dict(copy.deepcopy(r), measured_peak_bytes=3 * r["measured_peak_bytes"])
             if r["source"] == src else copy.deepcopy(r) for r in ok]
    again = fit_external(moved, load_contract(), min_margin())
    before = {x["id"]: x for x in out["rows"] if x["source"] == src}
    after = {x["id"]: x for x in again["rows"] if x["source"] == src}
    assert set(after) == set(before)
    for i, x in after.items():
        assert x["heldout_bytes"] == before[i]["heldout_bytes"], i
        assert x["screen"] == "inconsistent" and x["heldout_pct"] > 150, x
    assert again["folds"][src] == out["folds"][src]


# --- the rows as their sources give them (issue #37's audit) ---------------------------------
def _rows(name: str) -> dict[str, dict]:
    with open(f"calibration/external/{name}.jsonl") as f:
        return {r["id"]: r for r in map(json.loads, f) if r}


def test_axolotls_llama2_rows_ran_xformers_attention(shipped):
    """examples/llama-2/{qlora,lora}.yml at dc71d88 set `xformers_attention: true` (and leave
    flash_attention empty): xformers' memory-efficient kernel keeps no attention scores, so the
    rows are not eager attention and their records keep no (b, heads, s, s) term."""
    rows = _rows("axolotl-examples")
    recs = {r["id"]: r for r in shipped}
    for i in ("axolotl-examples-llama2-7b-qlora-rtx4090",
              "axolotl-examples-llama2-7b-lora-int8-rtx4090"):
        assert rows[i]["config"]["attention"] == "xformers", i
        assert "xformers_attention: true" in rows[i]["source"]["evidence"]
        assert recs[i]["paths"]["attention"] == "per_record"


def test_torchtunes_may_2024_rows_do_not_claim_pr_961_reproduced_them():
    """pytorch/torchtune PR #961 ("Update README table", closed unmerged): 'Can't reproduce
    24.1GB on a single device full finetune and instead seeing 20.2 peak memory allocated'."""
    may = [r for r in _rows("torchtune-readme").values() if r["source"]["date"] == "2024-05-09"]
    assert len(may) == 7
    for r in may:
        assert "reproduced these numbers" not in r["notes"], r["id"]
        assert "could not" in r["notes"] and "20.2" in r["notes"] and "24.1" in r["notes"]


def test_torchtunes_405b_peak_is_gib_as_its_logger_divides():
    """torchtune/training/memory.py at 30b8519 divides max_memory_allocated by 1024**3: the
    README's "44.8 GB" for Llama 3.1 405B is GiB, like every other row of that table."""
    row = _rows("torchtune-readme")["torchtune-readme-llama3.1-405b-qlora-8xa100"]
    assert row["measured"]["peak_unit"] == "GiB"
    assert to_record(row, "x:1")["measured_peak_bytes"] == int(44.8 * GiB)


def test_litgpt_config_hub_rows_give_the_configs_grad_accum():
    """Each config_hub/finetune/*.yaml at 00af8b0d gives global_batch_size, devices and
    micro_batch_size; litgpt's gradient_accumulation_iters is global // devices // micro
    (llama-2-7b/lora.yaml: 8 // 1 // 2 = 4; tiny-llama/lora.yaml: 8 // 1 // 8 = 1)."""
    rows = _rows("litgpt-config-hub")
    for i, r in rows.items():
        ga = r["config"]["grad_accum"]
        assert isinstance(ga, int) and ga >= 1, i
        assert f"train.grad_accum={ga}" in r["mens_spec"] and "global_batch_size" in r["notes"]
    assert rows["litgpt-config-hub-llama2-7b-lora-a10g"]["config"]["grad_accum"] == 4
    assert rows["litgpt-config-hub-tinyllama-lora-a10g"]["config"]["grad_accum"] == 1


def test_torchtunes_tokens_per_s_held_out_by_source_is_stated(shipped):
    """The speed model predicts torchtune's rows from the other sources' fit: where a row
    lands outside 2× of its measurement, the docs (stages/calibrate.md) state the miss with its number (and the
    median over every held-out row), so no in-sample figure stands for the acceptance."""
    from mens.calibrate.speed import fit_speed

    speed = fit_speed(copy.deepcopy(shipped), 0.35)
    rows = {x["id"]: x for x in speed["records"]}
    readme = open("docs/stages/calibrate.md").read()   # the calibration page
    for i in ("torchtune-readme-llama3.1-8b-lora-rtx4090",
              "torchtune-readme-llama3.1-8b-qlora-rtx4090"):
        x = rows[i]
        ratio = x["heldout_tokens_per_s"] / x["measured_tokens_per_s"]
        if not 0.5 <= ratio <= 2.0:
            assert f"{ratio:.2f}×" in readme and f"{x['heldout_tokens_per_s']:,.0f}" in readme, \
                (i, ratio)
    assert f"median ratio {speed['heldout_ratio']['median']:.2f}" in readme


def test_the_report_gives_screened_and_all_rows_errors(fitted):
    """`mens fit`'s report: how many rows enter the fit and why, the held-out errors over the
    screened rows and over all rows side by side, per cell and overall, and the rows a margin
    does not cover with the screen that set each aside."""
    from mens.calibrate.report import external_text

    text = "\n".join(external_text({
        "external": fitted["fit"], "external_rows": fitted["rows"], "cells": fitted["cells"],
        "external_counts": fitted["counts"], "external_folds": fitted["folds"], "speed": {}}))
    n = fitted["counts"]
    assert f"{n['modelled']} are one device's peak" in text and f"so {n['fitted']} enter" in text
    assert "- held out, screened: 48 records" in text and "- held out, all rows: 58 records" in text
    assert "held-out median (screened / all)" in text
    assert "not covered: torchtune-readme-llama3.1-8b-lora-a6000" in text and "(not_binding)" in text
    assert "re-decided on the other sources' rows" in text


# --- issue #49 item 10: the QLoRA rows' physics, and the margin it earns ---------------------
QLORA_CKPT = "cuda/qlora/ckpt/bf16"
TORCHTUNE_QLORA = "torchtune-readme-llama3.1-8b-qlora-rtx4090"   # 7.4 GiB on an RTX 4090


def test_qlora_rows_held_out_agree_and_torchtunes_row_is_planned_near_its_reading(shipped, fitted):
    """Held out by source, the QLoRA rows the fit keeps miss by a median ≤ 10 % (both cells
    together, and the checkpointed cell alone), and torchtune's Llama-3.1-8B QLoRA row (7.4 GiB
    measured on an RTX 4090) is planned — the committed cell's prediction plus its margin, the
    planner's own arithmetic — at most 1.30× its reading (1.49× when the margin was 35 %); its
    held-out prediction plus that margin likewise."""
    from mens.calibrate.records import record_components
    from mens.plan.memory import predict, usable_cell

    rows = [x for x in fitted["rows"] if "/qlora/" in x["cell"] and not x["screen"]]
    assert len(rows) >= 20
    assert statistics.median(abs(x["heldout_pct"]) for x in rows) <= 10
    assert fitted["cells"][QLORA_CKPT]["heldout"]["median_abs_pct"] <= 10
    contract = load_contract()
    rec = next(r for r in shipped if r["id"] == TORCHTUNE_QLORA)
    planned = predict(record_components(rec, contract), usable_cell(contract, QLORA_CKPT),
                      min_margin(contract))
    assert planned["peak_bytes"] / rec["measured_peak_bytes"] <= 1.30, planned["peak_bytes"] / GiB
    row = next(x for x in fitted["rows"] if x["id"] == TORCHTUNE_QLORA)
    assert row["heldout_bytes"] * (1 + planned["uncertainty"]) / row["measured_bytes"] <= 1.30


def test_a_framework_that_cast_the_unquantized_weights_to_fp32_is_modelled_so(shipped):
    """PEFT's prepare_model_for_kbit_training casts every weight bitsandbytes left in 16 bits
    (embeddings, lm_head, norms) to fp32; axolotl at dc71d88 calls it and casts nothing back
    for xformers (the cast back came for flash-attention only, later). fp32 embeddings make
    the residual stream fp32, and Linear4bit hands its output back in its input's dtype, so the
    layers' activations and checkpoints are fp32 too; the lm_head's matmul runs under autocast
    (16-bit logits, as before). The row says so (config.unquantized_dtype, and the yml's
    lora_dropout), its record models it, and no other row or mens's own QLoRA does (mens loads
    4-bit weights without that cast)."""
    from mens.calibrate.records import record_components
    from mens.plan.memory import Arch, LaneModel

    row = _rows("axolotl-examples")["axolotl-examples-llama2-7b-qlora-rtx4090"]
    assert row["config"]["unquantized_dtype"] == "fp32" and row["config"]["lora_dropout"] == 0.05
    assert "lora_dropout: 0.05" in row["source"]["evidence"]
    recs = {r["id"]: r for r in shipped}
    rec = recs[row["id"]]
    assert rec["lane"]["unquantized_fp32"] and rec["lane"]["lora_dropout"] == 0.05
    contract = load_contract()
    up = record_components(rec, contract)
    plain = record_components({**rec, "lane": {**rec["lane"], "unquantized_fp32": False}},
                              contract)
    p = Arch(**rec["arch"]).params()
    assert up["weights"] - plain["weights"] == 2 * (p["total"] - p["linear"])
    assert up["checkpoints"] == 2 * plain["checkpoints"]
    assert up["activations"] > 1.3 * plain["activations"]
    assert up["logits"] == plain["logits"] and up["optimizer"] == plain["optimizer"]
    assert [i for i, r in recs.items() if r["lane"].get("unquantized_fp32")] == [row["id"]]
    assert LaneModel(kind="qlora", precision="bf16").unquantized_fp32 is False
    bad = copy.deepcopy(row)
    bad["config"]["unquantized_dtype"] = "fp8"     # a value the model has no dtype for
    with pytest.raises(DataError, match="unquantized_dtype"):
        to_record(bad, "axolotl-examples.jsonl:1")
