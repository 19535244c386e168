"""What a run tells its loggers (issue #17): every TRAIN_STEP number under stable names, the
held-out evals of the validation loop, read back with the loggers' own readers; the `logger`
group (`logger=csv` as before, spec.yaml files that hold `logger: wandb` as a string)."""
from __future__ import annotations

import yaml

from train_util import FAST_TRAIN
from mens.run.telemetry import problems, read

# what every run logs per optimizer step (names of mens.train.trainer.METRICS)
PER_STEP = {"train/loss", "train/lr", "train/grad_norm", "perf/tokens_per_sec",
            "perf/real_tokens", "perf/padding_pct", "perf/eta_s", "mem/peak_mb",
            "mem/planned_peak_mb"}


def test_tensorboard_holds_every_step_metric_and_the_validation_loops_evals(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from mens.config.compose import compose
    from mens.plan.output import plan_run
    from mens.train.run import train_run
    from mens.train.trainer import METRICS

    fast = [a for a in FAST_TRAIN if not a.startswith("logger=")]
    cfg = compose([*fast, "logger=tensorboard", "train.max_steps=4", "train.eval_every=2",
                   "train.eval_max_records=2"])
    spec, plan = plan_run(cfg, tmp_path, "train")
    summary = train_run(spec, plan, tmp_path)
    files = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert files
    acc = EventAccumulator(str(files[0].parent))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert PER_STEP <= tags and PER_STEP <= set(METRICS.values())
    assert [e.step for e in acc.Scalars("train/lr")] == [1, 2, 3, 4]
    # the validation loop at steps 2 and 4, then the final evaluation at step 4
    evals = [(e.step, e.value) for e in acc.Scalars("eval/loss")]
    assert [s for s, _ in evals] == [2, 4, 4]
    assert {"eval/collateral_loss", "summary/measured_peak_bytes",
            "summary/predicted_peak_bytes"} <= tags
    # the validation loop scores as evaluate() does: its step-4 number is summary.json's
    assert abs(evals[1][1] - summary["eval_loss_adapter"]) < 1e-4 * summary["eval_loss_adapter"]
    # every row a real run writes has the fields mens.run.telemetry says it has
    assert [p for r in read(tmp_path / "telemetry.jsonl") for p in problems(r)] == []
    rows = [r for r in read(tmp_path / "telemetry.jsonl") if r["event"] == "EVAL"]
    assert [(r["model"], r.get("step")) for r in rows if r["split"] == "eval"] == \
        [("base", None), ("training", 2), ("training", 4), ("adapter", None)]


def test_a_spec_yaml_with_logger_as_a_string_still_reruns(tmp_path, compile_run):
    """spec.yaml files written before `logger` was a group hold `logger: wandb`."""
    from mens.plan.spec import compile_run as compile_cfg, load_rerun

    spec, _ = compile_run("+hw=cpu", "logger=csv")
    old = spec.config_dict()
    old["logger"] = "csv"
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(old))
    cfg = load_rerun(str(tmp_path))
    assert cfg.logger.kind == "csv" and cfg.logger.project is None
    assert compile_cfg(cfg)[0].logger.kind == "csv"


def test_logger_project_then_env_then_mens(compile_run, monkeypatch):
    from mens.train.loggers import project

    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    assert project(compile_run("+hw=cpu")[0]) == "mens"
    monkeypatch.setenv("WANDB_PROJECT", "x")
    assert project(compile_run("+hw=cpu")[0]) == "x"
    assert project(compile_run("+hw=cpu", "logger.project=y")[0]) == "y"


def test_a_sweep_jobs_name_adds_the_overrides_its_sweep_varies(compile_run, monkeypatch):
    from hydra.conf import HydraConf
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from mens.train.loggers import run_name

    spec, _ = compile_run("+hw=cpu", "lane=qlora", "train.seq_len=512")
    assert run_name(spec, 0).startswith("tiny-vox_lang-qlora-") and "=" not in run_name(spec, 0)
    monkeypatch.setattr("sys.argv", ["mens", "-m", "lane=lora,qlora", "train.seq_len=256,512",
                                     "logger=csv"])
    hc = OmegaConf.structured(HydraConf)
    hc.mode = RunMode.MULTIRUN
    hc.overrides.task = ["lane=qlora", "train.seq_len=512", "logger=csv"]
    try:
        HydraConfig.instance().set_config(OmegaConf.create({"hydra": hc}))
        assert run_name(spec, 0).endswith("-train.seq_len=512")
        assert run_name(spec, 0).startswith("tiny-vox_lang-qlora-")
    finally:
        HydraConfig.instance().cfg = None
