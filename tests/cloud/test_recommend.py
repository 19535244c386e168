"""`mens recommend`: the memo's numbers are the plans and the estimates, for the same cases."""
from __future__ import annotations

from cloud_util import read_json

from mens.plan.memory import GiB


def test_the_memo_for_a_128_gb_mac_says_what_mens_plan_and_cloud_estimate_say(
        cloud_cli, tmp_path, compile_run):
    from mens.cloud.estimate import estimate
    from mens.config.compose import compose

    hw = ["+hw=m_series", "hw.memory_gb=128"]
    run = tmp_path / "r"
    p = cloud_cli("mens.recommend", *hw, "recommend.rungs=[8b,32b]", "recommend.lanes=[qlora,full]",
                  f"hydra.run.dir={run}")
    assert p.returncode == 0, p.stderr
    memo = (run / "recommendation.md").read_text()
    data = read_json(run / "recommendation.json")
    assert [(c["rung"], c["lane"]) for c in data["cases"]] == \
        [("8b", "qlora"), ("8b", "full"), ("32b", "qlora"), ("32b", "full")]
    for c in data["cases"]:
        over = [*hw, f"+rung={c['rung']}", f"lane={c['lane']}"]
        spec, plan = compile_run(*over)                            # = `mens plan <over>`
        assert c["fits"] == plan.fits
        assert c["peak_gb"] == round(plan.peak_bytes / GiB, 3)
        assert c["headroom_gb"] == round(plan.headroom_bytes / GiB, 3)
        assert (c["shape"]["micro_batch"], c["shape"]["grad_accum"]) == \
            (plan.shape.micro_batch, plan.grad_accum)
        assert f"| {c['rung']} | {c['lane']} | {'yes' if c['fits'] else 'no'} |" in memo
        assert f"{c['peak_gb']:.2f}" in memo and f"{c['gguf']['type']} (" in memo
        if not c["fits"]:                                           # = `mens cloud estimate <over>`
            best = next(o for o in estimate(compose(over))["offers"] if o["fits"])
            assert c["cloud"]["id"] == best["id"]
            assert c["cloud"]["est_cost_usd"] == best["est_cost_usd"]
            assert f"{best['id']}: {best['per_device_peak_gb']:.2f} GiB/dev" in memo
            assert f"${best['est_cost_usd']:,.2f}" in memo
    assert any(not c["fits"] for c in data["cases"]) and any(c["fits"] for c in data["cases"])
    assert "## Assumptions" in memo and "ESTIMATE" in memo and data["paragraph"] in memo
    assert data["paragraph"].startswith("On m_series with 128 GiB, the largest rung")


def test_gguf_choice_takes_the_best_type_that_fits():
    from mens.recommend.memo import gguf_choice
    from mens.config.options import load_option

    r = load_option("rung", "8b")
    assert gguf_choice(r, 100)["type"] == "f16"
    # 8.19e9 params: q6_k 6.26 GiB, q4_k_m 4.66 GiB, + 0.56 GiB KV (4096 tokens) + 1 GiB
    assert gguf_choice(r, 8)["type"] == "q6_k"
    small = gguf_choice(r, 6.5)
    assert small["type"] == "q4_k_m" and small["fits"] and small["need_gb"] <= 6.5
    assert not gguf_choice(r, 2)["fits"]


def test_mens_recommend_is_a_mens_command(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from mens.cli import main; sys.exit(main(['recommend', '+hw=rtx4090', "
            f"'recommend.rungs=[0.6b]', 'recommend.lanes=[lora]', 'hydra.run.dir={tmp_path}/r']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "| 0.6b | lora | yes |" in (tmp_path / "r" / "recommendation.md").read_text()


def test_the_memo_times_each_objective_by_what_it_runs(compose):
    """The same rung and data: DPO's hours above SFT's, GRPO's (sampling token by token) far
    above both, and the memo says what of it is assumed."""
    from mens.recommend.memo import recommend, render_md

    r = recommend(compose(["+hw=h100", "recommend.rungs=[0.6b]",
                           "recommend.lanes=[lora,dpo,grpo]", "spoke=skill_creation"]))
    h = {c["lane"]: c["est_hours"] for c in r["cases"]}
    assert 0 < h["lora"] < h["dpo"] < h["grpo"] and h["grpo"] > 5 * h["lora"], h
    memo = render_md(r)
    assert "objective dpo: per record 2 policy rows" in memo
    assert "objective grpo: per record 4 sampled completions" in memo
    assert "decoding: 1 ms per layer per token step" in memo
