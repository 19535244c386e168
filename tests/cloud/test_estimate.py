"""`mens cloud estimate`: every offer planned by the same planner, timed, priced and ranked."""
from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest
from cloud_util import read_json

from mens.cloud.catalog import COLUMNS
from mens.plan.memory import GiB


def test_32b_qlora_lists_ranked_dated_sourced_offers_and_says_why_not(cloud_cli, tmp_path):
    p = cloud_cli("mens.cloud", "estimate", "+rung=32b", "lane=qlora", f"hydra.run.dir={tmp_path}/r")
    assert p.returncode == 0, p.stderr
    est = read_json(tmp_path / "r" / "estimate.json")
    offers = est["offers"]
    assert len(offers) >= 10 and len({o["provider"] for o in offers}) >= 3
    assert all(o["date"] and o["source"] for o in offers)
    fits = [o["fits"] for o in offers]
    assert fits == sorted(fits, reverse=True) and any(fits) and not all(fits)   # fits first
    costs = [o["est_cost_usd"] for o in offers if o["fits"]]
    assert costs == sorted(costs)                                               # then by cost
    for o in offers:
        if not o["fits"]:
            assert any(r.startswith("does not fit") for r in o["reasons"]), o
            assert o["per_device_peak_gb"] > o["budget_gb"]
        if o["spot_price_hour"] is not None:
            assert any(r.startswith("spot") for r in o["reasons"])
    assert est["skipped_no_tier"] == {}   # every shipped GPU has a tier (the RTX 5090 since #26)
    assert [o["tier"] for o in offers if o["id"] == "vast:RTX5090:1"] == ["rtx5090"]
    assert "catalogue:" in p.stdout and "ASSUMPTION" in p.stdout
    # hours stand on the fitted speed model, which says its sources and held-out error (#26)
    assert "speed: qlora kernels at" in p.stdout and "leave-one-source-out" in p.stdout
    assert all(o["speed_how"] for o in offers if o["est_hours"] is not None)
    assert "do not fit: " in p.stdout and "runpod:RTX4090:1 (" in p.stdout


def test_8b_full_proposes_a_sharded_multi_gpu_offer_planned_as_mens_plan_plans_it(compile_run):
    from mens.cloud.estimate import estimate
    from mens.config.compose import compose

    est = estimate(compose(["+rung=8b", "lane=full"]))
    multi = [o for o in est["offers"] if o["fits"] and o["count"] > 1]
    assert multi and multi[0] is next(o for o in est["offers"] if o["fits"])   # the cheapest
    top = multi[0]
    assert top["strategy"] == "fsdp2" and top["world_size"] == top["count"]
    assert not any(o["fits"] for o in est["offers"] if o["count"] == 1 and o["tier"] == "h100")
    # the per-device peak and shape are what `mens plan +hw=<tier> hw.devices=<n>` says
    spec, plan = compile_run("+rung=8b", "lane=full", f"+hw={top['tier']}",
                             f"hw.devices={top['count']}")
    assert top["per_device_peak_gb"] == round(plan.peak_bytes / GiB, 3)
    assert (top["shape"]["micro_batch"], top["shape"]["grad_accum"]) == \
        (plan.shape.micro_batch, plan.grad_accum)


def test_time_is_tokens_over_the_plans_speed_or_an_assumed_mfu(compile_run):
    from mens.cloud.estimate import estimate
    from mens.config.compose import compose

    base = ["+rung=4b", "lane=lora", "cloud.tokens=2000000000", "cloud.providers=[lambda]"]
    a = {o["id"]: o for o in estimate(compose(base))["offers"]}
    b = {o["id"]: o for o in estimate(compose(base + ["cloud.mfu=0.7", "cloud.setup_hours=0"]))["offers"]}
    o = a["lambda:H100:2"]
    spec, plan = compile_run("+rung=4b", "lane=lora", "+hw=h100", "hw.devices=2")
    # the default: the plan's own tokens/s (the speed model, over both devices)
    assert o["est_hours"] == pytest.approx(2e9 / plan.est_tokens_per_s / 3600 + 0.25, rel=1e-3)
    # est_hours is shown to 4 significant digits; the cost is of the unrounded hours
    assert o["est_cost_usd"] == pytest.approx(o["est_hours"] * 8.38, rel=1e-3)
    assert o["speed_how"] == plan.speed["how"] and "fitted on" in o["speed_how"]
    # cloud.mfu: an assumed MFU instead, on an independent FLOPs count
    arch, s = __import__("mens.plan.memory", fromlist=["Arch"]).Arch.of(spec.rung), plan.shape
    n = arch.params()["linear"] + arch.vocab * arch.hidden
    fpt = n * (4 + (2 if s.checkpointing else 0)) + 6 * arch.layers * s.seq_len * arch.heads * arch.head_dim
    # plus the plan's gradient communication per micro-step (DDP: the adapter's all-reduce)
    comm = plan.communication["s_per_micro_step"]
    tokens = s.micro_batch * s.seq_len
    assert comm > 0
    assert b["lambda:H100:2"]["est_hours"] == pytest.approx(
        2e9 / 2 * (fpt / (989e12 * 0.7) + comm / tokens) / 3600, rel=1e-3)
    assert "ASSUMED 70% MFU" in b["lambda:H100:2"]["speed_how"]


def test_an_old_catalogue_is_said_on_every_estimate(tmp_path):
    from mens.cloud.estimate import estimate, render
    from mens.config.compose import compose

    f = tmp_path / "old.csv"
    f.write_text(",".join(COLUMNS) + "\nlambda,A6000,1,48,14,100,1.09,,us-east-1,2025-01-01,x\n"
                 "lambda,H100,1,80,26,225,4.29,,us-east-1,2026-11-01,y\n")
    est = estimate(compose([f"cloud.catalog={f}", "cloud.max_age_days=90"]),
                   today=dt.date(2026, 12, 1))
    assert est["catalogue_stale"] and est["catalogue_age_days"] == 699
    old = next(o for o in est["offers"] if o["gpu"] == "A6000")
    assert any("699 days old" in r for r in old["reasons"])
    assert not any("days old" in r for r in next(o for o in est["offers"] if o["gpu"] == "H100")["reasons"])
    # rich wraps the line at the console's width, where the tmp path's length decides the break
    assert "OLDER THAN cloud.max_age_days" in " ".join(render(est, 20).split())


def test_estimating_imports_no_torch(tmp_path):
    code = ("import sys\nfrom mens.cli.cloud import main\n"
            f"rc = main(['estimate', '+rung=8b', 'lane=qlora', 'hydra.run.dir={tmp_path}/r'])\n"
            "assert rc == 0, rc\n"
            "heavy = [m for m in ('torch', 'transformers', 'lightning', 'peft') if m in sys.modules]\n"
            "assert not heavy, heavy\nprint('clean')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0 and "clean" in p.stdout, p.stderr


def test_hours_count_the_users_data_and_epochs(tmp_path, monkeypatch):
    """data=file: the tokens of the user's records × epochs, so 10× the records is ~10× the
    hours (set-up aside) — not the spoke's demo corpus (#26)."""
    import json

    from mens.cloud.estimate import estimate
    from mens.config.compose import compose

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def data(n: int):
        path = tmp_path / f"d{n}.jsonl"
        path.write_text("".join(json.dumps({"messages": [
            {"role": "user", "content": f"question {i}: how do I sort a list of {i} numbers?"},
            {"role": "assistant", "content": f"Use sorted() on the {i} numbers. " + "It is "
             "stable, so equal keys keep their order; give key= for another order. " * 30}]})
            + "\n" for i in range(n)))
        return str(path)
    common = ["+rung=8b", "lane=lora", "data=file", "cloud.setup_hours=0",
              "cloud.providers=[lambda]"]
    one = estimate(compose(common + [f"data.path={data(200)}"]))
    ten = estimate(compose(common + [f"data.path={data(2000)}"]))
    assert "your data file:d200" in one["tokens"]["how"] and "spoke" not in one["tokens"]["how"]
    assert 9.0 <= ten["tokens"]["tokens"] / one["tokens"]["tokens"] <= 11.0
    a = {o["id"]: o["est_hours"] for o in one["offers"] if o["est_hours"]}
    b = {o["id"]: o["est_hours"] for o in ten["offers"] if o["est_hours"]}
    assert a and all(9.0 <= b[k] / a[k] <= 11.0 for k in a), (a, b)
    two = estimate(compose(common + [f"data.path={data(200)}", "curriculum=flat",
                                     "curriculum.epochs=2", "curriculum.caps=[10,10]"]))
    assert two["tokens"]["tokens"] == 2 * estimate(compose(common + [
        f"data.path={data(200)}", "curriculum=flat"]))["tokens"]["tokens"]


def test_dpo_costs_more_hours_than_sft_on_the_same_data(compile_run):
    """A DPO record is 2 policy rows + 2 reference forwards: on the same tokens every offer
    estimates more hours than SFT's, by what the plan's cost says — with the fitted speed model
    and with an assumed cloud.mfu alike (issue #37)."""
    from mens.cloud.estimate import estimate, render
    from mens.config.compose import compose
    from mens.plan.eta import cost_of

    base = ["+rung=4b", "spoke=skill_creation", "cloud.tokens=2000000000",
            "cloud.providers=[lambda]", "cloud.setup_hours=0"]
    runs = {}
    for extra in ([], ["cloud.mfu=0.5"]):
        sft = {o["id"]: o for o in estimate(compose(base + ["lane=lora", *extra]))["offers"]}
        runs[bool(extra)] = est = estimate(compose(base + ["lane=dpo", *extra]))
        dpo = {o["id"]: o for o in est["offers"]}
        both = [k for k in sft if sft[k]["est_hours"] and dpo[k]["est_hours"]]
        assert both and all(dpo[k]["est_hours"] > 1.2 * sft[k]["est_hours"] for k in both)
        assert all(dpo[k]["tokens_per_s"] < dpo[k]["row_tokens_per_s"] for k in both)
    est = runs[False]
    dpo = {o["id"]: o for o in est["offers"]}
    # the default's hours are the plan's cost: 2e9 record tokens, each a distinct pair's
    spec, plan = compile_run(*base, "lane=dpo", "+hw=h100", "hw.devices=2")
    assert dpo["lambda:H100:2"]["est_hours"] == pytest.approx(
        cost_of(plan).seconds(2e9, 2e9) / 3600, rel=1e-3)
    assert dpo["lambda:H100:2"]["objective"].startswith(
        "dpo: per record 2 policy rows (forward + backward) + 2 reference forwards")
    text = " ".join(render(est, 20).split())
    assert "objective dpo: per record 2 policy rows" in text
    assert "assumption: a forward without grad" in text


def test_more_gpus_are_not_linearly_faster(compile_run):
    """#41: an offer's hours carry the plan's gradient communication — an 8-GPU FSDP2 offer is
    less than 8 × one GPU's rate — and `hw.nodes=2` plans each offer × 2 nodes over the
    provider's network, priced for both."""
    from mens.cloud.estimate import estimate
    from mens.config.compose import compose

    base = ["+rung=8b", "lane=full", "cloud.tokens=2000000000", "cloud.providers=[runpod]"]
    one = {o["id"]: o for o in estimate(compose(base))["offers"]}
    o = one["runpod:H100-SXM:8"]
    c = o["communication"]
    assert o["fits"] and c["strategy"] == "fsdp2" and 0 < c["share"] < 1
    assert c["speedup_vs_one_device"] < 8 and any("communication" in r for r in o["reasons"])
    two = {o["id"]: o for o in estimate(compose(base + ["hw.nodes=2"]))["offers"]}
    t = two["runpod:H100-SXM:8"]
    assert t["nodes"] == 2 and t["world_size"] == 16 and t["network"]["inter_gbs"] == 1.25
    assert "ASSUMED" in t["network"]["source"]
    # RunPod's pods over an assumed 10 Gb/s: two nodes are slower than one, and cost more
    assert t["est_hours"] > o["est_hours"] and t["est_cost_usd"] > 2 * o["est_cost_usd"]
    assert t["communication"]["speedup_vs_one_node"] < 1
