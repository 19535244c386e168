"""Acceptance of issue #12 on the embedded tiny rung: a user's own files — a 300-record chat
JSONL, an Alpaca JSON, a ShareGPT Parquet and a DPO preference JSONL, each written by the test —
train for real, and each run's summary shows the held-out loss of that data's own split below
the base's (for the pairs: held-out DPO loss below ln 2, reward accuracy above 0.5)."""
from __future__ import annotations

import math

import pytest
import yaml
from train_util import FAST_TRAIN
from userdata import (alpaca_records, chat_records, preference_records, sharegpt_records,
                      write_json, write_jsonl, write_parquet)

# a short real run: 12 optimizer steps of 8 records, the lr the tiny rung learns fast with
SHORT = [*FAST_TRAIN, "train.global_batch=8", "train.micro_batch=8", "train.max_steps=12",
         "lane.optimizer.lr=3e-3", "train.seq_len=128", "data.eval_fraction=0.1",
         "train.eval_max_records=24"]


def _train(out, *overrides):
    from mens.config.compose import compose
    from mens.plan.output import plan_run
    from mens.train.run import train_run

    spec, plan = plan_run(compose([*SHORT, "data=file", *overrides]), out, "train")
    return spec, train_run(spec, plan, out)


@pytest.mark.parametrize("fmt", ["chat_jsonl", "alpaca_json", "sharegpt_parquet"])
def test_users_sft_files_train_below_base_on_their_own_held_out_split(tmp_path, fmt):
    path = {"chat_jsonl": lambda: write_jsonl(tmp_path / "chat.jsonl", chat_records(300)),
            "alpaca_json": lambda: write_json(tmp_path / "alpaca.json", alpaca_records(200)),
            "sharegpt_parquet": lambda: write_parquet(tmp_path / "sg.parquet",
                                                      sharegpt_records(200))}[fmt]()
    extra = [] if fmt == "chat_jsonl" else ["data.collateral=none"]
    spec, summary = _train(tmp_path / "run", f"data.path={path}", *extra)
    assert summary["data"] == f"file:{path.stem}"
    assert summary["eval_records"] >= 10
    assert summary["eval_loss_adapter"] < summary["eval_loss_base"], summary
    saved = yaml.safe_load((tmp_path / "run" / "spec.yaml").read_text())
    assert saved["data_lock"][0]["path"] == str(path) and len(saved["data_lock"][0]["sha256"]) == 64
    assert saved["data"]["format"] == {"chat_jsonl": "messages", "alpaca_json": "alpaca",
                                       "sharegpt_parquet": "sharegpt"}[fmt]
    if fmt == "chat_jsonl":   # the spoke still supplies the collateral eval
        assert summary["collateral"]["spoke"] == spec.spoke.name
    else:
        assert summary["collateral"] is None


def test_users_preference_pairs_train_dpo_past_the_reference(tmp_path):
    path = write_jsonl(tmp_path / "pairs.jsonl", preference_records(120))
    _, summary = _train(tmp_path / "run", f"data.path={path}", "lane=dpo",
                        "data.collateral=none")
    assert summary["eval_kind"] == "dpo" and summary["eval_records"] >= 10
    assert summary["eval_loss_base"] == pytest.approx(math.log(2), abs=1e-4)   # policy = reference
    assert summary["eval_loss_adapter"] < math.log(2), summary
    assert summary["eval_reward_accuracy"] > 0.5, summary


def test_plain_text_trains_on_every_token(tmp_path):
    recs = [{"text": f"Vox note {i}: the river {i % 7} flows into lake {i % 5}. " * 3}
            for i in range(120)]
    path = write_jsonl(tmp_path / "notes.jsonl", recs)
    _, summary = _train(tmp_path / "run", f"data.path={path}", "data.collateral=none",
                        "train.max_steps=6")
    assert summary["eval_loss_adapter"] < summary["eval_loss_base"]


def test_a_rerun_says_when_its_data_changed(tmp_path, monkeypatch, capsys):
    from mens.cli.train import main

    path = write_jsonl(tmp_path / "chat.jsonl", chat_records(60))
    monkeypatch.chdir(tmp_path)
    args = [*SHORT, "data=file", f"data.path={path}", "data.collateral=none", "train.max_steps=1"]
    assert main([*args, f"hydra.run.dir={tmp_path}/orig"]) == 0
    assert main([f"rerun={tmp_path}/orig", f"hydra.run.dir={tmp_path}/same"]) == 0
    assert "changed" not in capsys.readouterr().err
    write_jsonl(path, chat_records(61))
    assert main([f"rerun={tmp_path}/orig", f"hydra.run.dir={tmp_path}/again"]) == 0
    err = capsys.readouterr().err
    assert f"data file {path} changed: sha256" in err
    notes = yaml.safe_load((tmp_path / "again" / "spec.yaml").read_text())["notes"]
    assert any(n.startswith("DATA_CHANGED:") for n in notes)
