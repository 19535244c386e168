"""`mens compare`'s wandb run (job_type eval), in the project of the runs it compares: the
before/after numbers in its summary, or the runs side by side as a table. Each compared run's
adapter (or full-lane model) artifact is used online, so the lineage reads train → eval;
offline wandb cannot use an artifact, so their names go in the config and the console says so."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from mens.config.schema import DEFAULT_WANDB_PROJECT
from mens.export.lineage import trained_run_id
from mens.run.rundir import RunDir, wandb_artifact

TABLE = ("final_loss", "eval_loss_base", "eval_loss_adapter", "tokens_per_sec",
         "predicted_peak_bytes", "measured_peak_bytes", "duration_s")


def sources(runs: list[Path]) -> list[str]:
    """The artifact names training logged for these runs (mens.train.loggers.log_weights)."""
    out = []
    for run in runs:
        wid = trained_run_id(run)
        if wid:
            out.append(wandb_artifact(RunDir(run).artifact_kind or RunDir.ADAPTER, wid))
    return out


def numbers(d: dict, prefix: str = "") -> dict:
    """The numeric leaves of a result (rows and curves left out)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(numbers(v, f"{prefix}{k}/"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"{prefix}{k}"] = v
    return out


def log_compare(logger, runs: list[Path], out: Path, result: dict) -> str | None:
    """The comparison as a wandb run of job_type eval; its id, or None when logger≠wandb."""
    if logger.kind != "wandb":
        return None
    import wandb

    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    mode, used = os.environ["WANDB_MODE"], sources(runs)
    project = logger.project or os.environ.get("WANDB_PROJECT") or DEFAULT_WANDB_PROJECT
    run = wandb.init(project=project, entity=logger.entity, dir=str(out), job_type="eval",
                     name=f"compare-{'-'.join(r.name for r in runs)}"[:128], mode=mode,
                     reinit="create_new", config={"mode": result["mode"],
                                                  "runs": [str(r) for r in runs],
                                                  "source_artifacts": used})
    try:
        for name in used if mode != "offline" else []:
            run.use_artifact(f"{name}:latest")
        if used and mode == "offline":
            print(f"mens: note: wandb is offline: the compare run names the artifacts it "
                  f"evaluated ({', '.join(used)}) in its config; the lineage link needs it "
                  f"logged online", file=sys.stderr)
        if result["mode"] == "across":
            rows = [[r["name"], *(r.get(k) for k in TABLE)] for r in result["runs"]]
            run.log({"compare/runs": wandb.Table(columns=["run", *TABLE], data=rows)})
        else:
            run.summary.update(numbers({k: v for k, v in result.items() if k != "rows"}))
    finally:
        run.finish()
    return run.id
