"""Composition: every option and recipe composes; typos and bad values fail at compose time."""
from __future__ import annotations


import pytest
import yaml
from omegaconf import OmegaConf

from mens.resources import CONF_DIR, RECIPES_DIR
from mens.errors import ConfigError

GROUPS = ["hw", "rung", "spoke", "lane", "curriculum"]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def test_groups_have_the_options_the_issue_names():
    assert set(options("hw")) >= {"auto", "cpu", "m_series", "rtx4080s", "rtx4090", "rtx3090",
                                  "a6000", "l40s", "a100_40g", "a100_80g", "h100", "h200"}
    assert options("rung") == sorted(["tiny", "0.6b", "1.7b", "4b", "8b", "14b", "32b", "hf",
                                      "qwen3-30b-a3b", "gpt-oss-20b", "smol", "gguf"])
    assert options("data") == ["file", "hf", "spoke"]
    assert options("spoke") == sorted(["vox_lang", "rust_workspace", "structured_shell",
                                       "mcp_tool_chain", "agent_harness", "speech_to_code",
                                       "populi_mesh", "skill_creation", "arith"])
    assert options("lane") == ["distill", "dpo", "full", "grpo", "kto", "lora", "orpo", "qlora",
                              "simpo"]
    assert options("curriculum") == ["flat", "three_epoch"]


def test_primary_defaults_leave_out_hw_and_rung():
    # so that `+hw=m_series +rung=0.6b` works exactly as the user types it
    defaults = yaml.safe_load((CONF_DIR / "mens.yaml").read_text())["defaults"]
    names = {next(iter(d)) if isinstance(d, dict) else d for d in defaults}
    assert not names & {"hw", "rung"}


def test_absent_hw_and_rung_mean_auto_and_tiny(compose):
    cfg = compose([])
    assert (cfg.hw.name, cfg.rung.name) == ("auto", "tiny")


def test_users_command_composes(compose):
    cfg = compose(["+hw=m_series", "+rung=0.6b"])
    assert (cfg.hw.name, cfg.hw.backend, cfg.rung.repo_id) == ("m_series", "mps", "Qwen/Qwen3-0.6B")


@pytest.mark.parametrize("group", GROUPS)
def test_every_option_composes_and_names_itself(compose, group):
    for option in options(group):
        plus = "+" if group in ("hw", "rung") else ""
        cfg = compose([f"{plus}{group}={option}"])
        assert cfg[group].name == option, f"{group}/{option}.yaml has name {cfg[group].name}"


@pytest.mark.parametrize("recipe", sorted(p.stem for p in RECIPES_DIR.glob("*.yaml")))
def test_every_recipe_composes_and_documents_its_command(compose, recipe):
    text = (RECIPES_DIR / f"{recipe}.yaml").read_text()
    assert f"+recipe={recipe}" in text.split("defaults:")[0], "launch command in the header"
    cfg = compose([f"+recipe={recipe}"])
    assert cfg.rung.name and cfg.hw.name


def test_recipe_choice_is_replaced_without_plus(compose):
    cfg = compose(["+recipe=qlora_0.6b_rust", "rung=1.7b"])
    assert (cfg.rung.name, cfg.lane.name, cfg.spoke.name) == ("1.7b", "qlora", "rust_workspace")


def test_ladder_rungs_set_every_architecture_number():
    # a rung file that forgot a field must not inherit one silently
    from mens.config.schema import RungConfig
    # hf: from the model's config.json; smol, gguf: from the GGUF's metadata
    for option in set(options("rung")) - {"hf", "smol", "gguf"}:
        raw = OmegaConf.load(CONF_DIR / "rung" / f"{option}.yaml")
        merged = OmegaConf.merge(OmegaConf.structured(RungConfig), raw)
        missing = [k for k in merged if OmegaConf.is_missing(merged, k)]
        assert not missing, f"rung/{option}.yaml lacks {missing}"


def test_spoke_mix_weights_and_sources(compose):
    for option in options("spoke"):
        spoke = compose([f"spoke={option}"]).spoke
        assert spoke.sources and abs(sum(s.weight for s in spoke.sources) - 1.0) < 1e-9
        assert spoke.admission.check and spoke.domain and 0 < spoke.min_rating <= 5
    assert compose(["spoke=skill_creation"]).spoke.preference_pairs


@pytest.mark.parametrize("overrides, key, words", [
    (["lane=lorax"], "lane", ["lorax", "lane=lora"]),
    (["+hw=rtx5080"], "hw", ["rtx5080", "hw=rtx5090"]),
    (["+train.seq_lenn=512"], "train.seq_lenn", ["train.seq_len"]),
    (["train.seq_lenn=512"], "train.seq_lenn", ["train.seq_len"]),
    (["+hw=h100", "+hw.memroy_gb=80"], "hw.memroy_gb", ["hw.memory_gb"]),
    (["train.max_steps=abc"], "train.max_steps", ["abc"]),
    (["hw.memory_gb=lots"], "hw.memory_gb", ["lots"]),
    (["train.micro_batch=0"], "train.micro_batch", ["auto", "positive"]),
    (["train.seq_len=-512"], "train.seq_len", ["positive"]),
    (["train.global_batch=abc"], "train.global_batch", ["auto"]),
    (["lane.gradient_checkpointing=sometimes"], "lane.gradient_checkpointing", ["auto"]),
    (["rung.init=rand"], "rung.init", ["random"]),
])
def test_config_errors_name_the_key(compose, overrides, key, words):
    with pytest.raises(ConfigError) as e:
        compose(overrides)
    assert e.value.code == 2 and e.value.key == key
    assert "\n" not in e.value.message
    for w in words:
        assert w in e.value.message


def test_typo_inside_an_option_file_fails_at_compose_time(tmp_path, compose, monkeypatch):
    # a user's own option file (./conf/lane/ of the working directory) with a misspelt key is
    # rejected by the schema, naming the key
    (tmp_path / "conf" / "lane").mkdir(parents=True)
    (tmp_path / "conf" / "lane" / "mine.yaml").write_text(
        "name: mine\nmethod: lora\nlora: {r: 8, alpah: 16}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        compose(["lane=mine"])
    assert "alpah" in e.value.message


def test_an_old_lane_option_file_with_kind_says_what_replaces_it(tmp_path, compose, monkeypatch):
    (tmp_path / "conf" / "lane").mkdir(parents=True)
    (tmp_path / "conf" / "lane" / "old.yaml").write_text("name: old\nkind: dpo\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        compose(["lane=old"])
    assert e.value.key == "lane.kind" and "`objective: dpo`" in e.value.message


def test_user_conf_beside_the_data_adds_options_and_recipes(tmp_path, compose, monkeypatch):
    (tmp_path / "conf" / "lane").mkdir(parents=True)
    (tmp_path / "conf" / "recipe").mkdir(parents=True)
    (tmp_path / "conf" / "lane" / "mine.yaml").write_text(
        "name: mine\nmethod: lora\nlora: {r: 4, alpha: 8}\n")
    (tmp_path / "conf" / "recipe" / "my_run.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /lane: mine\ntrain:\n  seq_len: 384\n")
    monkeypatch.chdir(tmp_path)
    cfg = compose(["+recipe=my_run"])
    assert cfg.lane.name == "mine" and cfg.lane.lora.r == 4 and cfg.train.seq_len == 384
    monkeypatch.chdir(tmp_path / "conf")          # elsewhere the user's options are not found
    with pytest.raises(ConfigError):
        compose(["lane=mine"])
