"""What the planner models of each objective (issue #28, item 4), torch-free: packing only for
SFT; GRPO's group in the rows, its generation (KV cache of num_generations × (prompt +
completion)), its in-step reference copy and its oracle processes — each a component with the
size the training side really allocates (mens.objective.grpo: HF generate's cache, Grpo.bind's
deepcopy, mens.objective.rewards' ORACLE_WORKERS child processes)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from mens.config.objectives import ORACLE_WORKERS
from mens.plan import rl
from mens.plan.memory import Arch, components, load_contract
from mens.plan.lane import lane_model

CPU = ["+hw=cpu", "hw.memory_gb=16"]
SHELL = ["spoke=structured_shell"]   # an oracle in a child process (bash -n)


@pytest.mark.parametrize("overrides, packs", [
    ([], True), (["lane=dpo", "spoke=skill_creation"], False), (["lane=kto", "spoke=skill_creation"], False),
    (["lane=grpo", *SHELL], False)])
def test_only_sft_plans_packed_rows(compile_run, overrides, packs):
    spec, plan = compile_run(*CPU, "train.seq_len=256", *overrides)
    assert spec.train.packing            # asked for (the default): only SFT's batches pack
    assert plan.shape.packing is packs
    assert (plan.components["packing_mask"] == 0) or packs


def _grpo(compile_run, *extra, seq_len=256):
    spec, plan = compile_run(*CPU, "lane=grpo", *SHELL, f"train.seq_len={seq_len}",
                             "train.micro_batch=2", "train.global_batch=2", *extra)
    return spec, plan, Arch.of(spec.rung)


def test_grpo_rows_are_the_group_and_its_terms_are_named(compile_run):
    spec, plan, arch = _grpo(compile_run, "lane.grpo.num_generations=6")
    lane = lane_model(spec.lane, spec.lane.precision, None, spec.spoke.admission.check)
    assert (lane.rows_per_record, lane.generation_tokens, lane.reference) == (6, 64, True)
    assert plan.cell.startswith("cpu/lora-grpo/")
    assert {"generation", "reference_copy", "oracle_procs"} <= set(plan.components)
    # six samples of each of 2 prompts are 12 rows: the same bytes as 12 SFT records
    c = load_contract()
    sft = replace(lane, objective="sft", rows_per_record=1, generation_tokens=0,
                  reference_copy=False, oracle_mib=0.0)
    mine = components(arch, lane, plan.shape, "cpu", c)
    rows = components(arch, sft, replace(plan.shape, micro_batch=12), "cpu", c)
    assert {k: mine[k] for k in rows if k != "logits"} == \
        {k: v for k, v in rows.items() if k != "logits"}
    assert rows["large_activations"] + rows["activations"] > 0
    # its completions are scored with the whole head over their T positions (completion_logps),
    # whatever train.loss, at backward's peak: 12 B per row × position × vocabulary entry at
    # fp32 (mens.plan.rl.logprob_bytes, measured in tests/plan/test_grpo_plan_memory.py)
    assert mine["logits"] == 12 * 64 * arch.vocab * 12 == rl.logprob_bytes(
        arch, 12, 64, 4, c["model"]["logits_fp32_copies"], True)["logits"]


def test_generation_is_the_kv_cache_beyond_the_steps_transients(compile_run):
    """Sampling runs before the step's forward, so it adds only its own peak — the KV cache (2 ×
    kv_heads × head_dim per token per layer, every row), its growth, one prefill layer and the
    sampling logits (mens.plan.rl.generation_bytes) — beyond the step's own transients. A grouped-query ladder rung keeps less cache than the step keeps
    activations even under checkpointing: nothing added; the same rung with full multi-head
    attention (kv_heads = heads: twice the cache) under checkpointing: the difference."""
    spec, plan, arch = _grpo(compile_run, "+rung=0.6b", "lane.gradient_checkpointing=true",
                             "lane.grpo.num_generations=8", seq_len=1024)
    c = load_contract()
    lane = lane_model(spec.lane, spec.lane.precision, None, spec.spoke.admission.check)
    shape, rows = plan.shape, plan.shape.micro_batch * 8
    assert plan.components["generation"] == 0
    mha = replace(arch, kv_heads=arch.heads)
    comps = components(mha, lane, shape, "cpu", c)
    # fp32 (cpu); the last sampled token is never fed back: seq_len − 1 cached positions
    kv = rows * (shape.seq_len - 1) * mha.layers * 2 * mha.kv_heads * mha.head_dim * 4
    step = sum(comps[k] for k in ("activations", "large_activations", "checkpoints", "logits",
                                  "packing_mask"))
    phase = [rl.generation_bytes(mha, rows, shape.seq_len, 64, 4, scores) for scores in (1, 0)]
    assert all(g["kv_cache"] == kv for g in phase)
    assert kv > step > 0 and comps["generation"] in {sum(g.values()) - step for g in phase}
    # without checkpointing the step keeps every layer's activations: more than the cache
    loose = components(mha, lane, replace(shape, checkpointing=False), "cpu", c)
    assert loose["generation"] == 0


@pytest.mark.parametrize("method", ["lora", "full"])
def test_the_reference_copy_is_the_whole_model_only_where_grpo_deepcopies_it(compile_run, method):
    spec, plan, arch = _grpo(compile_run, f"lane.method={method}")
    total = arch.params()["total"]
    if method == "full":      # Grpo.bind: copy.deepcopy(model) of fp32 masters
        assert plan.components["reference_copy"] == total * 4
    else:                     # the base with its adapters off: no copy
        assert plan.components["reference_copy"] == 0
    _, none, _ = _grpo(compile_run, f"lane.method={method}", "lane.grpo.beta=0")
    assert none.components["reference_copy"] == 0   # beta 0: no reference at all


def test_oracle_processes_follow_the_check_and_the_backend(compile_run):
    """The analytic component (a calibrated cell scales it with the overhead term it is fitted
    in: mens.calibrate.records.terms_for)."""
    c = load_contract()
    sizes = c["oracle_process_mib"]
    for spoke, check in (("structured_shell", "default"), ("rust_workspace", "rust_compiles")):
        spec, plan = compile_run(*CPU, "lane=grpo", f"spoke={spoke}", "train.seq_len=256",
                                 "train.micro_batch=2", "train.global_batch=2")
        arch = Arch.of(spec.rung)
        lane = lane_model(spec.lane, spec.lane.precision, None, spec.spoke.admission.check)
        raw = components(arch, lane, plan.shape, "cpu", c)
        assert raw["oracle_procs"] == ORACLE_WORKERS * sizes[check] * 2**20
        # on a GPU host memory is not the budget: the processes are not counted against it
        assert components(arch, lane, plan.shape, "cuda", c)["oracle_procs"] == 0


def test_a_record_of_unpacked_rows_is_kept_at_the_rows_it_had(tmp_path):
    """Calibration of an objective whose rows are not packed (mens.calibrate.measure): a pair
    batch is padded to its longest pair, a grpo row is the widest prompt + the completion —
    the record is evaluated at the longest rows its steps had, not at the planned seq_len."""
    import json

    from mens.calibrate.measure import unpacked_rows

    def record(objective, generation=0, shapes=None):
        return {"lane": {"objective": objective, "generation_tokens": generation},
                "seq_len": 512, "batch_shapes": shapes, "notes": []}

    sft = record("sft", shapes=[[2, 300]])
    unpacked_rows(sft, tmp_path)
    assert sft["seq_len"] == 512 and "planned_seq_len" not in sft    # packed: full rows
    dpo = record("dpo", shapes=[[2, 312], [2, 236], [2, 270]])
    unpacked_rows(dpo, tmp_path)
    assert (dpo["seq_len"], dpo["planned_seq_len"]) == (312, 512) and dpo["notes"]
    rows = [{"event": "TRAIN_STEP", "rows/length": n} for n in (150.0, 190.0, 170.0)]
    (tmp_path / "telemetry.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    grpo = record("grpo", generation=64, shapes=[[2, 40]])
    unpacked_rows(grpo, tmp_path)
    assert (grpo["seq_len"], grpo["planned_seq_len"]) == (190, 512)


@pytest.mark.parametrize("objective", ["sft", "dpo", "orpo", "simpo", "kto", "grpo"])
def test_the_rows_timed_are_the_rows_held(compose, objective):
    """Each card declares its cost once (mens.config.objectives.StepCost): the rows its passes
    run with grad are the rows the memory model holds (ORPO's 3: the chosen rows twice), a
    reference forward exactly where the objective has a reference, sampling only for GRPO."""
    from mens.config.objectives import card

    for extra in ([], ["lane.grpo.beta=0"] if objective == "grpo" else []):
        lane = compose([f"lane={'lora' if objective == 'sft' else objective}", *extra]).lane
        c = card(lane)
        ref = c.needs_reference(lane)
        cost = c.step_cost(c.rows_per_record(lane), ref)
        assert sum(cost.grad) == c.rows_per_record(lane)
        assert (cost.grad, cost.forward, cost.reference, cost.samples) == {
            "sft": ((1,), 0, 0, 0), "dpo": ((2,), 0, 2, 0), "orpo": ((2, 1), 0, 0, 0),
            "simpo": ((2,), 0, 0, 0), "kto": ((1,), 1, 2, 0),
            "grpo": ((4,), 4 if ref else 0, 0, 4)}[objective]
        assert cost.oracle == (objective == "grpo") and cost.where.startswith("mens/objective/")
