"""Issue #49 item 1: GRPO samples an optimizer step's whole window (micro_batch × grad_accum prompts
× G rows, mens.objective.grpo.Grpo.open_window) in generate calls of
lane.grpo.generation_batch_size rows (mens.plan.rl.calls) — and the plan sizes the generation phase
for those calls, not for one micro-batch, and times sampling and the oracle once per window.

Before: the plan counted one micro-batch's rows (micro_batch × G) while the code sampled the
window's in one call, so the tightest plans (micro_batch 1, a long accumulation) were the most
wrong — the 8b repro below said FITS at 50.9 GiB for 256 rows whose KV cache alone is ~72 GiB;
and the ETA charged sampling and the oracle per micro-batch (the same at grad_accum 1 and 16).
Plan-only (no torch); the measured side is tests/objective/test_grpo_window_memory.py."""
from __future__ import annotations

import pytest

from mens.errors import ConfigError, PlanRefused
from mens.plan import rl
from mens.plan.memory import DTYPE_BYTES, GiB, Arch

SHAPE = ("+hw=h100", "lane=grpo", "spoke=structured_shell", "train.seq_len=2048",
         "lane.grpo.num_generations=8", "lane.grpo.max_completion_length=1024")
REPRO = (*SHAPE, "+rung=8b")
G = 8


def sampled_rows(spec, plan) -> list[int]:
    """The rows of each generate call the objective makes for one window of this spec: the rule
    Grpo.sample splits it by, read from the spec training gets."""
    window = plan.shape.micro_batch * plan.grad_accum
    return [k * G for k in rl.calls(window, spec.lane.grpo.generation_batch_size, G)]


def holds_its_calls(spec, plan) -> int:
    """The plan's generation term is the KV cache of the largest call the code makes, and that
    cache with the weights fits the planned peak: the rows of that call."""
    rows = max(sampled_rows(spec, plan))
    arch = Arch.of(spec.rung)
    kv = rl.kv_cache_bytes(arch, rows, spec.train.seq_len, DTYPE_BYTES[spec.lane.precision])
    assert plan.sampling["generation_bytes"]["kv_cache"] == kv
    assert plan.components["weights"] + kv <= plan.peak_bytes <= plan.budget_bytes
    return rows


def test_the_8b_repro_plans_the_calls_it_samples(compile_run):
    spec, plan = compile_run(*REPRO, "train.micro_batch=1", "train.grad_accum=32")
    assert plan.sampling["window_rows"] == 256
    arch = Arch.of(spec.rung)
    # the whole window in one call: its KV cache alone is over the budget
    assert rl.kv_cache_bytes(arch, 256, 2048, 2) > 70 * GiB > plan.budget_bytes * 0.9
    assert plan.fits
    rows = holds_its_calls(spec, plan)
    assert G <= rows < 256 and sum(sampled_rows(spec, plan)) == 256
    # auto picked the fewest calls that fit (evened out): one call fewer does not fit
    calls = plan.sampling["generation_calls"]
    fewer = -(-32 // (calls - 1)) * G
    _, more = compile_run(*REPRO, "train.micro_batch=1", "train.grad_accum=32",
                          f"lane.grpo.generation_batch_size={fewer}")
    assert not more.fits and more.sampling["generation_calls"] == calls - 1


def test_32b_qlora_auto_sizing_holds_its_calls(compile_run):
    """The issue's second repro: auto sizing of 32b QLoRA GRPO said FITS with 8.4 GiB headroom
    for a window that needs 100+ GiB in one call."""
    spec, plan = compile_run(*SHAPE, "+rung=32b", "lane.method=qlora")
    assert plan.fits
    rows = holds_its_calls(spec, plan)
    assert rows < plan.sampling["window_rows"]
    assert plan.sampling["generation_calls"] == len(sampled_rows(spec, plan)) > 1


def test_an_asked_generation_batch_that_does_not_fit_refuses_with_the_way_out(
        compose, tmp_path, capsys):
    from mens.plan.output import plan_run

    cfg = compose([*REPRO, "train.micro_batch=1", "train.grad_accum=32",
                   "lane.grpo.generation_batch_size=256"])
    with pytest.raises(PlanRefused) as e:
        plan_run(cfg, tmp_path)
    assert e.value.code == 3
    assert "lane.grpo.generation_batch_size=null" in e.value.message
    out = capsys.readouterr().out
    assert "lane.grpo.generation_batch_size=256: lane.grpo.generation_batch_size=256 (as " \
           "asked)" in out.replace("\n", " ")


def test_the_generation_batch_is_a_multiple_of_the_group(compile_run):
    with pytest.raises(ConfigError) as e:
        compile_run(*REPRO, "lane.grpo.generation_batch_size=12")
    assert e.value.key == "lane.grpo.generation_batch_size"
    assert "lane.grpo.generation_batch_size=8" in e.value.message


def test_the_plan_prints_the_chosen_generation_batch_and_why(compose, tmp_path, capsys):
    from mens.plan.output import plan_run

    spec, plan = plan_run(compose([*REPRO, "train.micro_batch=1", "train.grad_accum=32"]),
                          tmp_path)
    out = " ".join(capsys.readouterr().out.split())
    rows = spec.lane.grpo.generation_batch_size
    assert (f"samples its window's 256 rows in {plan.sampling['generation_calls']} generate "
            f"calls of ≤ {rows} rows (lane.grpo.generation_batch_size={rows}: the window's 256 "
            f"rows in") in out
    assert "the largest call that fits" in out


def test_the_eta_charges_sampling_and_the_oracle_once_per_window(compose):
    """The code samples and calls the oracle once per optimizer step (its window): at grad_accum
    16 a micro-step carries 1/16 of one oracle call, and sampling 16 prompts in calls of
    generation_batch_size rows costs less per record than 16 calls of one prompt — the ETA of
    8b GRPO was 36.7 min at grad_accum 1 and 16 alike."""
    from mens.plan.eta import eta
    from mens.plan.spec import compile_run
    from mens.plan.speed import ORACLE_S_PER_CALL

    got = {}
    for accum in (1, 16):
        cfg = compose(["+hw=h100", "+rung=8b", "lane=grpo", "spoke=structured_shell",
                       "train.micro_batch=1", f"train.grad_accum={accum}"])
        spec, plan = compile_run(cfg)
        e = got[accum] = eta(cfg, spec, plan)
        windows = e["records"] / accum
        assert e["hours_by_part"]["oracle"] == pytest.approx(
            windows * ORACLE_S_PER_CALL / 3600, rel=1e-4)
        assert e["oracle"]["answers_per_window"] == accum * spec.lane.grpo.num_generations
    one, sixteen = got[1], got[16]
    assert sixteen["hours"] < one["hours"] / 2
    assert sixteen["hours_by_part"]["generation"] < one["hours_by_part"]["generation"] / 4
    assert sixteen["hours_by_part"]["policy"] == pytest.approx(one["hours_by_part"]["policy"])


def test_a_spawned_rollout_servers_row_cap_splits_the_requests(compile_run):
    """generation=server with the server the run starts (`mens serve`, its defaults): a window
    of 64 prompts × G 8 = 512 rows goes in requests the server admits (≤ 256 rows: its
    MAX_ROWS; rows × seq_len within serve.max_batch_tokens when it has one), each one the plan
    sizes the server's memory for."""
    from mens.config.publish import ServeConfig

    spec, plan = compile_run("+hw=h100", "+rung=tiny", "lane=grpo", "spoke=structured_shell",
                             "train.seq_len=512", "lane.grpo.num_generations=8",
                             "lane.grpo.max_completion_length=64", "lane.grpo.generation=server",
                             "train.micro_batch=1", "train.grad_accum=64")
    assert plan.fits and plan.sampling["window_rows"] == 512
    rows = sampled_rows(spec, plan)
    cap = ServeConfig().max_batch_tokens
    assert max(rows) <= min(rl.SERVE_MAX_ROWS, cap // 512) and sum(rows) == 512
    assert plan.sampling["generation_rows"] == max(rows)
    served = rl.server_generation_bytes(Arch.of(spec.rung), max(rows), 512, 64, 2, False)
    assert plan.sampling["generation_bytes"] == served
    # a server of the user's has limits of its own: not capped here
    spec, plan = compile_run("+hw=h100", "+rung=tiny", "lane=grpo", "spoke=structured_shell",
                             "train.seq_len=512", "lane.grpo.num_generations=8",
                             "lane.grpo.max_completion_length=64", "lane.grpo.generation=server",
                             "lane.grpo.server_url=http://127.0.0.1:9", "train.micro_batch=1",
                             "train.grad_accum=64")
    assert sampled_rows(spec, plan) == [512]


def test_the_row_cap_is_the_servers():
    batch = pytest.importorskip("mens.serve.batch")
    assert rl.SERVE_MAX_ROWS == batch.MAX_ROWS


def test_an_assumed_cloud_mfu_times_the_window_alike(compose):
    """`mens cloud estimate cloud.mfu=…` re-times the plan's cost at an assumed MFU: its oracle
    and sampling are once per window too (mens.cloud.estimate.rate passes the plan's accum)."""
    from mens.cloud.estimate import rate
    from mens.plan.spec import compile_run
    from mens.plan.speed import ORACLE_S_PER_CALL

    cfg = compose(["+hw=h100", "+rung=8b", "lane=grpo", "spoke=structured_shell",
                   "train.micro_batch=1", "train.grad_accum=16", "cloud.mfu=0.4"])
    spec, plan = compile_run(cfg)
    cost, _ = rate(cfg, spec, plan)
    assert cost.parts["oracle"]["s"] == plan.cost["parts"]["oracle"]["s"] == \
        pytest.approx(ORACLE_S_PER_CALL / 16)


def test_a_group_the_spawned_server_cannot_take_refuses(compose, tmp_path):
    """One micro-batch's group of 32 rows × 4,096 tokens is over what `mens serve` admits in a
    request (serve.max_batch_tokens): the plan refuses (exit 3) naming the key — it fits in
    memory, the server would answer 400 at the first step."""
    from mens.config.publish import ServeConfig
    from mens.plan.output import plan_run

    cap = ServeConfig().max_batch_tokens
    cfg = compose(["+hw=h100", "+rung=tiny", "lane=grpo", "spoke=structured_shell",
                   "train.seq_len=4096", "lane.grpo.num_generations=32",
                   "lane.grpo.max_completion_length=64", "lane.grpo.generation=server"])
    assert 32 * 4096 > cap
    with pytest.raises(PlanRefused) as e:
        plan_run(cfg, tmp_path)
    assert "serve.max_batch_tokens" in e.value.message
    assert e.value.plan.peak_bytes < e.value.plan.budget_bytes    # memory is not what stops it
    assert "shorten sequences (`train.seq_len=" in e.value.message
