"""`mens.export`'s wandb lineage: the GGUFs it writes as an artifact of a run of job_type
export, in the project of the training run it exports (mens.train.loggers names that run and
logs its adapter as `adapter-<run id>`; export never imports mens.train, so the artifact's
name is rebuilt here from the training run's offline files)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from mens.config.schema import DEFAULT_WANDB_PROJECT
from mens.run.rundir import artifact_name, wandb_artifact


def trained_run_id(run_dir: Path) -> str | None:
    """The wandb id of a run dir's training run (its newest `wandb/*run-*/run-<id>.wandb`)."""
    found = sorted(Path(run_dir).glob("wandb/*run-*/run-*.wandb"), key=lambda p: p.stat().st_mtime)
    return found[-1].stem.removeprefix("run-") if found else None


def log_export(run_dir: Path, logger, out: Path, files: list[dict], lane: str) -> str | None:
    """An export's GGUF files as a wandb artifact (type gguf) from a run of job_type export
    in the training run's project. Online it uses the training run's adapter artifact, so the
    lineage reads train → export; offline wandb cannot use an artifact ("Cannot use artifact
    when in offline mode"), so the adapter artifact's name is in the metadata, said on the
    console, and the link is made when the export is logged online. Returns the artifact's
    name, or None when the training run had no wandb run."""
    train_id = trained_run_id(run_dir)
    if logger.kind != "wandb" or train_id is None:
        return None
    import wandb

    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    mode = os.environ["WANDB_MODE"]
    source = wandb_artifact(artifact_name(lane), train_id)   # what training logged
    project = logger.project or os.environ.get("WANDB_PROJECT") or DEFAULT_WANDB_PROJECT
    run = wandb.init(project=project, entity=logger.entity, dir=str(out),
                     name=f"export-{Path(run_dir).name}", job_type="export", mode=mode,
                     reinit="create_new",
                     config={"source_run": str(run_dir), "source_wandb_id": train_id})
    try:
        if mode != "offline":
            run.use_artifact(f"{source}:latest")
        else:
            print(f"mens: note: wandb is offline: the export artifact names its source "
                  f"({source}) in its metadata; `wandb sync` of both runs keeps them, the "
                  f"lineage link needs the export logged online", file=sys.stderr)
        art = wandb.Artifact(f"gguf-{train_id}", type="gguf",
                             metadata={"source_artifact": source, "source_run": str(run_dir),
                                       "files": [f["path"] for f in files]})
        for f in files:
            if f["path"].endswith(".gguf"):
                art.add_file(str(out / f["path"]), name=f["path"])
        run.log_artifact(art, aliases=["latest"])
    finally:
        run.finish()
    return art.name
