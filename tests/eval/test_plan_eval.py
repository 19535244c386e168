"""The eval plan: batch sizes under the memory contract (torch-free, exact arithmetic)."""
from __future__ import annotations

from mens.config.options import load_option
from mens.plan.evaluate import eval_components, plan_eval
from mens.plan.memory import Arch, LaneModel, load_contract


def test_generation_keeps_every_layers_kv_and_loglik_the_full_logits():
    arch, lane, c = Arch.of(load_option("rung", "0.6b")), LaneModel("lora", "bf16"), load_contract()
    gen = eval_components(arch, lane, "cuda", c, 1024, 4, "generate")
    ll = eval_components(arch, lane, "cuda", c, 1024, 4, "loglik")
    assert gen["kv_cache"] == 2 * arch.layers * 4 * 1024 * arch.kv_heads * arch.head_dim * 2
    assert ll["kv_cache"] == 0 and ll["logits"] == 4 * 1024 * arch.vocab * (2 + 4)
    assert gen["weights"] == ll["weights"] == arch.params()["total"] * 2
    q = eval_components(arch, LaneModel("qlora", "bf16"), "cuda", c, 1024, 4, "generate")
    assert q["weights"] < gen["weights"] / 2     # nf4 linears


def test_the_largest_batch_that_fits_and_the_asked_one_checked():
    arch, lane, c = Arch.of(load_option("rung", "8b")), LaneModel("lora", "bf16"), load_contract()
    p = plan_eval(arch, lane, "cuda", c, 24 * 2**30, 2048, "loglik")
    assert p.fits and p.batch >= 1 and p.peak_bytes <= p.budget_bytes
    bigger = plan_eval(arch, lane, "cuda", c, 24 * 2**30, 2048, "loglik", asked=p.batch * 2)
    assert not bigger.fits and bigger.peak_bytes > p.budget_bytes      # the ask is checked
    none = plan_eval(arch, lane, "cuda", c, 8 * 2**30, 2048, "loglik")
    assert none.batch == 0 and not none.fits                           # 16 GB of weights
    assert "uncalibrated" in p.line() and p.margin >= 0.25
