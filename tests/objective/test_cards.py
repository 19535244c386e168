"""A lane is a method × an objective (issue #28): the options compose, the cards answer what
the stages ask, the retired `lane.kind` is read on the command line and in an old spec.yaml,
the planner's cells and rows follow the card, and KTO's labeled records. No model loads."""
from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from mens.config.objectives import CARDS, card, label, lane_fields
from mens.errors import ConfigError

PAIRS = ["spoke=skill_creation"]   # a spoke that ships chosen/rejected pairs


@pytest.mark.parametrize("overrides, method, objective, lane", [
    (["lane=lora"], "lora", "sft", "lora"),
    (["lane=full"], "full", "sft", "full"),
    (["lane=dpo", *PAIRS], "lora", "dpo", "lora-dpo"),
    (["lane=full", "lane.objective=dpo", *PAIRS], "full", "dpo", "full-dpo"),
    (["lane=dpo", "lane.method=qlora", *PAIRS], "qlora", "dpo", "qlora-dpo"),
    (["lane=kto"], "lora", "kto", "lora-kto"),
    (["lane=kto", "lane.method=full"], "full", "kto", "full-kto"),
    (["lane=orpo"], "lora", "orpo", "lora-orpo"),
    (["lane=simpo"], "lora", "simpo", "lora-simpo"),
    (["lane=grpo"], "lora", "grpo", "lora-grpo"),
])
def test_lane_options_compose_to_method_and_objective(compose, overrides, method, objective,
                                                      lane):
    cfg = compose(overrides)
    assert (cfg.lane.method, cfg.lane.objective) == (method, objective)
    assert label(cfg.lane) == lane
    assert lane_fields(cfg.lane) == {"lane": lane, "method": method, "objective": objective}


def test_objective_options_keep_their_lr_and_trl_defaults(compose):
    dpo = compose(["lane=dpo", *PAIRS]).lane
    assert dpo.optimizer.lr == 5e-6 and (dpo.dpo.beta, dpo.dpo.loss) == (0.1, "sigmoid")
    assert dpo.lora.r == 16                                  # from lora.yaml (its defaults)
    grpo = compose(["lane=grpo"]).lane.grpo
    assert (grpo.num_generations, grpo.max_completion_length, grpo.beta, grpo.epsilon,
            grpo.epsilon_high, grpo.loss_type, grpo.reward) == (4, 64, 0.04, 0.2, None, "dapo",
                                                               "partial")
    kto = compose(["lane=kto"]).lane.kto
    assert (kto.beta, kto.desirable_weight, kto.undesirable_weight) == (0.1, 1.0, 1.0)
    simpo = compose(["lane=simpo"]).lane.simpo
    assert (simpo.beta, simpo.gamma_beta_ratio) == (2.0, 0.5)


def test_cards_answer_rows_reference_and_records(compose):
    lora, dpo = compose(["lane=lora"]).lane, compose(["lane=dpo", *PAIRS]).lane
    grpo = compose(["lane=grpo", "lane.grpo.num_generations=6"]).lane
    assert [card(x).rows_per_record(x) for x in (lora, dpo, grpo)] == [1, 2, 6]
    assert (card(dpo).needs_reference(dpo), card(dpo).reference_in_step) == (True, False)
    assert not card(lora).needs_reference(lora)
    assert card(grpo).needs_reference(grpo)
    assert not card(grpo).needs_reference(compose(["lane=grpo", "lane.grpo.beta=0"]).lane)
    assert card("kto").record_kinds() == ("labeled", "pairs")
    assert {c.name for c in CARDS.values() if c.reference == "none"} == {"sft", "orpo", "simpo",
                                                                       "distill"}
    assert card(compose(["lane=full", "lane.objective=dpo", *PAIRS]).lane).lr_key(
        compose(["lane=full"]).lane) == "full_lr"
    with pytest.raises(ConfigError):
        card("rlhf")


def test_retired_lane_kind_on_the_command_line_is_mapped_and_said(compose, capsys):
    cfg = compose(["lane.kind=dpo", *PAIRS])
    err = capsys.readouterr().err
    assert (cfg.lane.method, cfg.lane.objective) == ("lora", "dpo")
    assert err.count("lane.kind=dpo") == 1 and "lane.method=lora lane.objective=dpo" in err
    cfg = compose(["lane=qlora", "lane.kind=full"])
    assert (cfg.lane.method, cfg.lane.objective) == ("full", "sft")
    assert "lane.method=full" in capsys.readouterr().err


def _old_spec(spec, tmp_path, kind: str):
    """spec.yaml as a mens before objectives wrote it: lane.kind, no method/objective, and the
    dpo section null off the dpo lane."""
    d = spec.config_dict()
    lane = d["lane"]
    for k in ("method", "objective", "orpo", "simpo", "kto", "grpo"):
        lane.pop(k)
    lane["kind"] = kind
    if kind != "dpo":
        lane["dpo"] = None
    run = tmp_path / kind
    run.mkdir()
    OmegaConf.save(OmegaConf.create(d), run / "spec.yaml")
    return run


@pytest.mark.parametrize("kind, overrides", [("dpo", ["lane=dpo", *PAIRS]),
                                             ("lora", ["lane=lora"]), ("full", ["lane=full"])])
def test_an_old_spec_with_lane_kind_reruns_as_it_planned(compile_run, tmp_path, capsys, kind,
                                                         overrides):
    from mens.plan.spec import compile_run as compile_cfg, load_rerun

    spec, plan = compile_run("+hw=cpu", "hw.memory_gb=16", *overrides)
    cfg = load_rerun(str(_old_spec(spec, tmp_path, kind)))
    assert f"`lane.kind={kind}` is retired" in capsys.readouterr().err
    again, plan2 = compile_cfg(cfg)
    assert again.lane == spec.lane
    assert (plan2.cell, plan2.peak_bytes, plan2.shape) == (plan.cell, plan.peak_bytes, plan.shape)


def test_plan_cells_sft_unchanged_and_dpo_its_own_with_twice_the_rows(compile_run):
    from dataclasses import replace

    from mens.plan.memory import Arch, components, load_contract
    from mens.plan.lane import lane_model

    _, sft = compile_run("+hw=cpu", "hw.memory_gb=16", "train.seq_len=256")
    spec, dpo = compile_run("+hw=cpu", "hw.memory_gb=16", "train.seq_len=256", "lane=dpo",
                            *PAIRS)
    assert sft.cell.startswith("cpu/lora/") and dpo.cell.startswith("cpu/lora-dpo/")
    lane = lane_model(spec.lane, spec.lane.precision)
    assert (lane.objective, lane.rows_per_record, lane.reference) == ("dpo", 2, True)
    shape, c = dpo.shape, load_contract()
    arch = Arch.of(spec.rung)
    pairs = components(arch, lane, shape, "cpu", c)
    rows = components(arch, replace(lane, objective="sft", rows_per_record=1),
                      replace(shape, micro_batch=2 * shape.micro_batch), "cpu", c)
    assert pairs == rows and pairs["activations"] > 0   # a pair batch is twice the rows


def test_unpair_and_labeled_records(tmp_path):
    from userdata import preference_records, write_jsonl

    from mens.data.formats import detect, kind, normalize, turns, unpair
    from mens.data.sources import load_data

    rec = normalize({"prompt": "Say hi", "completion": "hi", "label": True}, "labeled")
    assert kind(rec) == "labeled" and rec["label"] is True
    assert detect({"prompt": "a", "completion": "b", "label": False}) == "labeled"
    assert detect({"prompt": "a", "completion": "b"}) == "prompt_completion"
    assert [m["role"] for m in turns(rec)] == ["user", "assistant"]
    pair = {"id": "p1", "prompt": [{"role": "user", "content": "q"}],
            "chosen": [{"role": "assistant", "content": "good"}],
            "rejected": [{"role": "assistant", "content": "bad"}], "phase": "warmup"}
    good, bad = unpair([pair])
    assert (good["label"], bad["label"]) == (True, False)
    assert good["completion"][0]["content"] == "good" and bad["completion"][0]["content"] == "bad"
    assert (good["id"], bad["id"], good["phase"]) == ("p1:chosen", "p1:rejected", "warmup")
    base = {"source": "file", "eval_fraction": 0.1, "decontam_n": 13, "decontam_threshold": 0.5}
    path = write_jsonl(tmp_path / "d.jsonl", preference_records(40))
    kto = load_data({**base, "path": str(path)}, "kto")             # pairs → labeled
    assert kto.stats["unpaired"] and all(kind(r) == "labeled" for r in kto.train + kto.eval)
    assert sum(r["label"] for r in kto.train) * 2 == len(kto.train)
    labeled = write_jsonl(tmp_path / "l.jsonl", [{"prompt": f"q{i}", "completion": f"a{i}",
                                                  "label": i % 3 > 0} for i in range(40)])
    assert load_data({**base, "path": str(labeled)}, "kto").format == "labeled"
    from mens.errors import DataError
    with pytest.raises(DataError) as e:
        load_data({**base, "path": str(labeled)}, "dpo")
    assert "lane.objective=kto" in e.value.message
    with pytest.raises(Exception) as e:
        normalize({"prompt": "a", "completion": "b", "label": "yes"}, "labeled")
    assert "label" in json.dumps(str(e.value))
