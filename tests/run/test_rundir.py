"""RunDir.artifact — the one answer to "adapter or full model" — and the places mens.run owns:
the gate receipt's writer, calibration.json, export/, wandb artifact names."""
from __future__ import annotations

import json

from mens.run.receipt import RECEIPT, artifact_dir, artifact_sha256, read_receipt, write_receipt
from mens.run.rundir import RunDir, artifact_name, wandb_artifact


def _adapter(run: RunDir) -> None:
    run.adapter.mkdir(parents=True, exist_ok=True)
    (run.adapter / "adapter_config.json").write_text("{}")
    (run.adapter / "adapter_model.safetensors").write_bytes(b"a")


def _model(run: RunDir) -> None:
    run.model.mkdir(parents=True, exist_ok=True)
    (run.model / "config.json").write_text("{}")


def test_artifact_is_adapter_or_model_or_none(tmp_path):
    lora, full, none, half = (RunDir(tmp_path / n) for n in ("lora", "full", "none", "half"))
    _adapter(lora)
    _model(full)
    none.path.mkdir()
    half.adapter.mkdir(parents=True)              # a save never completed: no adapter_config
    assert (lora.artifact, lora.artifact_kind) == (lora.adapter, RunDir.ADAPTER)
    assert (full.artifact, full.artifact_kind) == (full.model, RunDir.MODEL)
    assert none.artifact is None and none.artifact_kind is None and half.artifact is None
    _model(lora)                                  # both: the adapter is what was trained
    assert lora.artifact == lora.adapter
    for run in (lora, full, none):
        assert artifact_dir(run.path) == run.artifact
    assert artifact_sha256(none.path) is None and artifact_sha256(full.path)


def test_a_lane_saves_and_logs_its_artifact_under_the_same_kind():
    assert artifact_name("full") == RunDir.MODEL == "model"
    assert {artifact_name(k) for k in ("lora", "qlora", "dpo")} == {RunDir.ADAPTER}
    assert wandb_artifact(artifact_name("lora"), "abc123") == "adapter-abc123"
    assert wandb_artifact(artifact_name("full"), "abc123") == "model-abc123"


def test_the_receipt_is_written_in_one_place_atomically(tmp_path):
    run = RunDir(tmp_path)
    assert read_receipt(tmp_path) is None
    path = write_receipt(tmp_path, {"verdict": "pass"})
    assert path == tmp_path / RECEIPT and read_receipt(tmp_path) == {"verdict": "pass"}
    assert [p.name for p in run.path.iterdir()] == [RECEIPT]   # no temp file left behind


def test_calibration_and_export_places(tmp_path):
    run = RunDir(tmp_path)
    assert run.calibration == tmp_path / "calibration.json" and not run.is_calibration
    run.write_json(RunDir.CALIBRATION, {"status": "ok"})
    assert run.is_calibration and json.loads(run.calibration.read_text())["status"] == "ok"
    assert run.export == tmp_path / "export"
