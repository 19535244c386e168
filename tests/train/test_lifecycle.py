"""The run's lifecycle points: the model built inside Lightning's configure_model, and only
rank 0 writing the run directory (ready for several processes)."""
from __future__ import annotations

import json

from train_util import FAST_TRAIN


def test_the_model_can_be_built_inside_configure_model(compile_run, tmp_path):
    """A real Lightning fit where MensModule gets build() instead of a model: Lightning calls
    configure_model, which builds it once; the steps train it."""
    import lightning as L

    from mens.data.corpus import is_pair, load_spoke
    from mens.data.examples import examples_for
    from mens.model.load import load_model, load_tokenizer
    from mens.train.datamodule import MensData
    from mens.train.module import MensModule

    spec, _ = compile_run(*FAST_TRAIN, "train.max_steps=2", purpose="train")
    tok = load_tokenizer(spec.rung)
    records = [r for r in load_spoke(spec.spoke, seed=0)[0] if not is_pair(r)]
    examples, _ = examples_for(records, tok, spec, list(spec.curriculum.phases), False)
    records = [r for r in records if r["id"] in examples]
    data = MensData(spec, examples, records, False, None)   # None: a bool mask, as SDPA takes
    built = []

    def build():
        built.append(load_model(spec, tokenizer=tok)[0])
        return built[-1]

    module = MensModule(None, spec, data.position, data.planned_steps(), build=build)
    assert module.model is None
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=2, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0,
                        default_root_dir=str(tmp_path))
    trainer.fit(module, datamodule=data)
    assert len(built) == 1 and module.model is built[0] and trainer.global_step == 2
    assert any(p.grad is not None for p in module.model.parameters() if p.requires_grad)


def test_only_rank_zero_writes_the_run_dir(tmp_path, monkeypatch):
    from mens.run.rundir import RunDir, rank_zero
    from mens.train.telemetry import Telemetry

    run = RunDir(tmp_path / "run")
    monkeypatch.setenv("LOCAL_RANK", "1")          # what Lightning's launcher sets on rank 1
    assert not rank_zero()
    run.write_json(RunDir.SUMMARY, {"x": 1})
    tel = Telemetry(run.telemetry)
    assert tel.emit("TRAIN_STEP", step=1)["step"] == 1
    tel.close()
    assert not run.path.exists()                   # nothing written, not even the folder
    monkeypatch.setenv("LOCAL_RANK", "0")
    run.write_json(RunDir.SUMMARY, {"x": 1})
    Telemetry(run.telemetry).emit("TRAIN_STEP", step=1)
    assert json.loads(run.summary.read_text()) == {"x": 1} and run.telemetry_rows("TRAIN_STEP")
