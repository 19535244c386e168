"""`python -m mens.compare` for real: before/after on trained tiny runs (a zeroed adapter must
come out identical to the base), and across runs of different lanes (table + PNG)."""
from __future__ import annotations

import json

import pytest

from train_util import FAST_TRAIN
from serve_util import adapter_copy
from wandb_util import wandb_run


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """A second real run, on the full lane, to compare with the LoRA tiny_run."""
    from mens.config.compose import compose
    from mens.plan.output import plan_run
    from mens.train.run import train_run

    out = tmp_path_factory.mktemp("full_run")
    cfg = compose([*FAST_TRAIN, "train.max_steps=3", "lane=full", "lane.optimizer.lr=1e-4"])
    spec, plan = plan_run(cfg, out, "train")
    train_run(spec, plan, out)
    return out


def _compare(mens_cli, tmp_path, *args):
    out = tmp_path / "cmp"
    r = mens_cli("mens.compare", *args, f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    return r, out, json.loads((out / "compare.json").read_text())


def test_before_after_lora(mens_cli, tmp_path, tiny_run):
    r, out, res = _compare(mens_cli, tmp_path, f"run={tiny_run}", "compare.prompts=4",
                           "compare.max_tokens=16")
    summary = json.loads((tiny_run / "summary.json").read_text())
    # held-out loss both ways, recomputed: the very numbers training reported
    assert res["eval_loss_base"] == pytest.approx(summary["eval_loss_base"], abs=1e-5)
    assert res["eval_loss_tuned"] == pytest.approx(summary["eval_loss_adapter"], abs=1e-5)
    assert res["eval_loss_delta"] == pytest.approx(res["eval_loss_tuned"] - res["eval_loss_base"])
    assert res["eval_loss_delta"] < 0              # lr 1e-3 for 10 steps: it learned something
    assert res["prompts"] == 4 and len(res["rows"]) == 4
    assert 0 < res["share_outputs_differ"] <= 1
    assert res["mean_kl_tuned_base"] > 0
    md = (out / "compare.md").read_text()
    assert "share of prompts whose greedy output differs" in md and md in r.stdout
    # the comparison is a wandb run of job_type eval (offline here) holding its numbers
    w = wandb_run(out)
    assert w["run"].job_type == "eval" and w["run"].display_name == f"compare-{tiny_run.name}"
    assert {"eval_loss_base", "eval_loss_tuned", "share_outputs_differ",
            "collateral/eval_loss_tuned"} <= w["summary"]
    print(f"\nbefore/after (lora): loss {res['eval_loss_base']:.4f} → {res['eval_loss_tuned']:.4f}, "
          f"differ {res['share_outputs_differ']:.2f}, KL {res['mean_kl_tuned_base']:.4f}, "
          f"agreement {res['mean_token_agreement']:.3f}")


def test_before_after_zeroed_adapter_is_identical(mens_cli, tmp_path, tiny_run):
    zero = adapter_copy(tiny_run, tmp_path / "zero", 0.0)
    _, _, res = _compare(mens_cli, tmp_path, f"run={zero}", "compare.prompts=3",
                         "compare.max_tokens=12", "logger=none")
    assert res["eval_loss_tuned"] == res["eval_loss_base"]
    assert res["share_outputs_differ"] == 0 and res["mean_token_agreement"] == 1
    assert res["mean_first_divergence"] is None
    assert res["mean_kl_tuned_base"] == pytest.approx(0, abs=1e-12)


def test_before_after_full_lane(mens_cli, tmp_path, full_run):
    _, _, res = _compare(mens_cli, tmp_path, f"run={full_run}", "compare.prompts=2",
                         "compare.max_tokens=8")
    summary = json.loads((full_run / "summary.json").read_text())
    assert res["lane"] == "full"
    assert res["eval_loss_tuned"] == pytest.approx(summary["eval_loss_adapter"], abs=1e-5)
    assert res["eval_loss_base"] == pytest.approx(summary["eval_loss_base"], abs=1e-5)


def test_across_runs_table_and_png(mens_cli, tmp_path, tiny_run, full_run):
    import matplotlib.image

    # bare paths, one of them a glob, as a user types them
    r, out, res = _compare(mens_cli, tmp_path, str(tiny_run.parent / f"{tiny_run.name[:-1]}*"),
                           str(full_run))
    assert [x["lane"] for x in res["runs"]] == ["lora", "full"]
    assert res["spec_differences"]["lane.method"] == ["lora", "full"]
    assert [(x["method"], x["objective"]) for x in res["runs"]] == [("lora", "sft"), ("full", "sft")]
    for x, run in zip(res["runs"], (tiny_run, full_run)):
        s = json.loads((run / "summary.json").read_text())
        assert x["eval_loss_adapter"] == s["eval_loss_adapter"] and x["duration_s"] == s["duration_s"]
        assert x["final_loss"] > 0 and x["tokens_per_sec"] > 0 and len(x["curve"]) == x["steps"]
        assert x["predicted_peak_bytes"] == s["predicted_peak_bytes"]
    assert "| lane | lora | full |" in r.stdout and "| lane.method | lora | full |" in r.stdout
    png = matplotlib.image.imread(out / "loss_curves.png")
    assert png.shape[0] > 100 and png.shape[1] > 100
    w = wandb_run(out)      # the runs side by side as a wandb table, in a run of job_type eval
    [table] = [h for h in w["history"] if h.get("compare/runs/_type") == "table-file"]
    assert w["run"].job_type == "eval" and table["compare/runs/nrows"] == 2


def test_nothing_to_compare_is_a_config_error(mens_cli, tmp_path):
    r = mens_cli("mens.compare", f"hydra.run.dir={tmp_path / 'x'}")
    assert r.returncode == 2 and "nothing to compare" in r.stderr
    r = mens_cli("mens.compare", str(tmp_path / "no_such_run"), str(tmp_path / "nor_this"),
                 f"hydra.run.dir={tmp_path / 'y'}")
    assert r.returncode == 2 and "matches nothing" in r.stderr
