"""Plans that hold on the GPUs users own (#26): published runs planned as written fit with the
peak and speed their sources measured, no published fit is refused, refusals offer only
changes, the plan names the model's exact counts, and a change of the formulas is stale."""
from __future__ import annotations

import json
import os

import pytest

from mens.plan.memory import GiB

LLAMA31_8B = {  # meta-llama/Llama-3.1-8B config.json (the fields mens reads)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
    "tie_word_embeddings": False, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "torch_dtype": "bfloat16"}
COMMIT = "0e9e39f249a16976918f6564b8830bc894c89659"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A hub cache holding Llama-3.1-8B's config.json alone, as `hf download … config.json`
    leaves it (no network here: the weights are never needed to plan)."""
    repo = tmp_path / "hub" / "models--meta-llama--Llama-3.1-8B"
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(LLAMA31_8B))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hub"


TORCHTUNE = ["+hw=rtx4090", "+rung=hf", "rung.repo_id=meta-llama/Llama-3.1-8B",
             "train.seq_len=2048", "train.micro_batch=2", "lane.gradient_checkpointing=true"]


# qlora + ckpt is external again (#49): axolotl's Llama-2 QLoRA row is modelled with the fp32
# its framework cast the unquantized weights to, and the cell's margin shrank from 35 % to the
# 10 % its held-out rows earn — the QLoRA plan went from 1.49× torchtune's reading to ≤ 1.30×.
@pytest.mark.parametrize("lane, gib, external", [("lora", 16.2, True), ("qlora", 7.4, True)])
def test_torchtunes_rtx4090_rows_planned_as_written(compile_run, hub, lane, gib, external):
    """torchtune's README: Llama-3.1-8B on one RTX 4090, batch 2 packed to 2,048 with
    activation checkpointing: LoRA 16.2 GiB, QLoRA 7.4 GiB. Planned as written it fits, the
    fitted prediction is within -10 %..+25 % of the reading and the planned peak (prediction +
    the cell's margin) is above it, by at most 1.30×. Its tokens/s are checked held out by
    source, not here (tests/calibrate/test_external.py: the plan's speed fit includes
    torchtune's own rows)."""
    spec, p = compile_run(*TORCHTUNE, f"lane={lane}")
    assert p.fits and p.external == external, (p.peak_bytes / GiB, p.cell)
    assert -0.10 <= p.raw_bytes / GiB / gib - 1 <= 0.25, p.raw_bytes / GiB
    assert gib <= p.peak_bytes / GiB <= 1.30 * gib, p.peak_bytes / GiB
    assert p.speed["measured"] and "leave-one-source-out" in p.speed["how"]
    assert p.params_total == 8_030_261_248 and 0 < p.params_trainable < p.params_total


def test_the_plan_names_the_exact_counts_and_its_sources(mens_cli, hub, tmp_path):
    r = mens_cli("mens.plan", *TORCHTUNE, "lane=lora", f"hydra.run.dir={tmp_path}/p",
                 env={"HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    assert "parameters: 8,030,261,248" in r.stdout and "trainable 41,943,040" in r.stdout
    assert "external cell cuda/lora/ckpt/bf16" in r.stdout and "torchtune-readme" in r.stdout
    plan = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert plan["params_total"] == 8_030_261_248 and plan["external"] and plan["sources"]
    assert plan["speed"]["tokens_per_s"] > 0 and plan["speed"]["measured"]


# Published fits mens refuses, said rather than hidden. The lora + nockpt cell's margin covers
# every held-out record of it (14 %: LitGPT's Llama-3.2-1B LoRA sits 13.9 % above its held-out
# prediction), and LitGPT's larger rows, which read *allocated* bytes, are predicted 5-7 % above
# their readings before that margin: Llama 2 7B 18.4 GiB read, 22.4 GiB planned on an A10G's
# 22.1 GiB budget; Mistral 7B (v0.1 and v0.2) 19.2 read, 23.6 planned; Llama 2 13B on a 40 GB
# A100 35.5 read, 42.6 planned (37.3 budget). Planning them from allocated bytes would need a
# reserved-over-allocated gap the evidence does not show: LitGPT's allocated rows sit above the
# analytic count (median +6 %) as much as the reserved ones do (+2 %).
KNOWN_REFUSALS = {"litgpt-resource-tables-llama2-13b-lora-mb1-a100-40g",
                  "litgpt-config-hub-llama2-7b-lora-a10g",
                  "litgpt-config-hub-mistral-7b-v0.2-lora-a10g",
                  "litgpt-config-hub-mistral-7b-lora-a10g"}


def test_no_published_fit_with_room_to_spare_is_refused():
    from mens.calibrate.records import collect
    from mens.config.options import load_option
    from mens.plan.hardware import tier_budget
    from mens.plan.memory import Arch, LaneModel
    from mens.plan.planner import PlanRequest, plan

    recs, _ = collect(["calibration/external"])
    checked, refused = 0, set()
    for r in recs:
        if r["status"] != "ok" or not r.get("tier") or r["devices"] != 1:
            continue
        hw = load_option("hw", r["tier"])
        if r["measured_peak_bytes"] > 0.9 * hw.memory_gb * GiB:   # < 10 % to spare
            continue
        lane = LaneModel(**{**r["lane"], "lora_targets": tuple(r["lane"]["lora_targets"])})
        p = plan(PlanRequest(
            arch=Arch(**r["arch"]), lane=lane, backend="cuda",
            budget_bytes=int(tier_budget(hw, None)[2] * GiB), seq_len=r["seq_len"],
            micro_batch=r["micro_batch"], grad_accum=1, checkpointing=r["checkpointing"],
            packing=r["packing"], paths=tuple(r["paths"].items())))
        checked += 1
        if not p.fits:
            refused.add(r["id"])
    assert checked >= 30 and refused == KNOWN_REFUSALS


def test_a_change_of_the_formulas_makes_every_fit_stale(compile_run, monkeypatch):
    import mens.plan.contract as contract

    _, fresh = compile_run("+hw=cpu", "+rung=0.6b", "lane=lora")
    assert fresh.fitted
    monkeypatch.setattr(contract, "FORMULA_VERSION", contract.FORMULA_VERSION + 1)
    spec, stale = compile_run("+hw=cpu", "+rung=0.6b", "lane=lora")
    assert not stale.fitted and not stale.calibrated
    assert any("formula version" in n and "make fit" in n for n in spec.notes), spec.notes
    assert load_version() == contract.FORMULA_VERSION - 1


def load_version() -> int:
    from mens.plan.memory import load_contract
    return load_contract()["version"]


def test_the_planners_numbers_live_in_the_contract():
    """The 8 MiB heap threshold, the loss's chunk and the least margin are the contract's
    (the training code reads the same numbers), not constants beside it."""
    from mens.plan.memory import load_contract, min_margin, shipped_constant
    from mens.train import allocator, chunked_ce

    m = load_contract()["model"]
    assert allocator.MMAP_THRESHOLD_BYTES == m["fixed_heap_mmap_mib"] * 2**20 == \
        shipped_constant("fixed_heap_mmap_mib") * 2**20
    assert chunked_ce.DEFAULT_BUDGET == m["logits_chunk_mib"] * 2**20
    assert min_margin() == load_contract()["margins"]["uncalibrated_min"]
    src = open(os.path.join(os.path.dirname(allocator.__file__), "..", "plan", "planner.py")).read()
    assert "0.35" not in src and "0.25" not in src
