"""The run directory: one owner for its layout and its writes.

    <run dir>/
      .hydra/  spec.yaml  plan.json  telemetry.jsonl  checkpoints/{last.ckpt,…}
      adapter/ (PEFT) or model/ (full lane)   summary.json (written last: a dir without it
      is unfinished)   export/   outcome.json (a sweep job's exit)   gate.json (receipt.py)
      calibration.json (a calibration record: mens.calibrate)

Every file is written atomically (a temp name in the same folder, then rename), so a reader
never sees half a file and an interrupted job leaves no partial file under a final name.
Only rank 0 writes (several processes train one run); other ranks' writes are no-ops.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Callable

from mens.run.telemetry import read as read_telemetry


def rank_zero() -> bool:
    """True in the process that owns the run dir: rank 0 of a multi-process run, or the only
    one. Read from the launcher's environment (torchrun / Lightning set these)."""
    for var in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"):
        if int(os.environ.get(var, "0") or 0) != 0:
            return False
    return True


def atomic_write(path: Path | str, text: str) -> Path:
    """Write via a temp file and rename, so a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


class RunDir:
    SPEC, PLAN, TELEMETRY, SUMMARY = "spec.yaml", "plan.json", "telemetry.jsonl", "summary.json"
    OUTCOME, CHECKPOINTS, ADAPTER, MODEL, EXPORT = ("outcome.json", "checkpoints", "adapter",
                                                    "model", "export")
    CALIBRATION = "calibration.json"

    def __init__(self, path: Path | str):
        self.path = Path(path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # --- layout ----------------------------------------------------------------------------
    spec = property(lambda self: self.path / self.SPEC)
    plan = property(lambda self: self.path / self.PLAN)
    telemetry = property(lambda self: self.path / self.TELEMETRY)
    summary = property(lambda self: self.path / self.SUMMARY)
    outcome = property(lambda self: self.path / self.OUTCOME)
    checkpoints = property(lambda self: self.path / self.CHECKPOINTS)
    last_checkpoint = property(lambda self: self.path / self.CHECKPOINTS / "last.ckpt")
    adapter = property(lambda self: self.path / self.ADAPTER)
    model = property(lambda self: self.path / self.MODEL)
    export = property(lambda self: self.path / self.EXPORT)   # export.out may put it elsewhere
    calibration = property(lambda self: self.path / self.CALIBRATION)

    @property
    def finished(self) -> bool:
        return self.summary.is_file()

    @property
    def is_run(self) -> bool:
        """A dir mens trained into (finished or not)."""
        return self.telemetry.is_file() or self.summary.is_file()

    @property
    def has_adapter(self) -> bool:
        return (self.adapter / "adapter_config.json").is_file()

    @property
    def has_model(self) -> bool:
        return (self.model / "config.json").is_file()

    @property
    def artifact(self) -> Path | None:
        """The trained artifact: adapter/ (LoRA, QLoRA, DPO) or model/ (the full lane); None
        while the run has saved neither. The one place that decides "adapter or full model"."""
        if self.has_adapter:
            return self.adapter
        if self.has_model:
            return self.model
        return None

    @property
    def artifact_kind(self) -> str | None:
        """RunDir.ADAPTER ("adapter"), RunDir.MODEL ("model") or None: `artifact`'s name."""
        a = self.artifact
        return None if a is None else a.name

    @property
    def is_calibration(self) -> bool:
        """A calibration record's dir (mens.calibrate): a measurement, not a run to serve."""
        return self.calibration.is_file()

    # --- lookup: the one way to find run dirs (compare, the ladder, the studio, demo) -------
    @classmethod
    def find(cls, root: Path | str, *, marker: str = TELEMETRY,
             depths: tuple[int, ...] | None = None, where: Callable[[RunDir], bool] | None = None,
             calibration: bool = False, itself: bool = False, newest: bool = False,
             limit: int | None = None) -> list[Path]:
        """Run dirs under root: each dir holding `marker` (telemetry.jsonl: a run that started;
        summary.json: a finished one; eval.json: one evaluated), `depths` levels below root
        (None: any depth, root included), kept by `where`, and — unless `calibration` — not a
        calibration record. itself: a root that is a run (is_run) is the one run found (a
        command naming runs directly). Sorted by path, or `newest` first by the marker's
        mtime; the first `limit`. A root that is no dir holds none."""
        root = Path(root)
        if itself and cls(root).is_run:
            return [root]
        if not root.is_dir():
            return []
        hits = (root.rglob(marker) if depths is None else
                (p for d in depths for p in root.glob("/".join(["*"] * d + [marker]))))
        runs = [p.parent for p in hits
                if (calibration or not cls(p.parent).is_calibration)
                and (where is None or where(cls(p.parent)))]
        if newest:   # a stable sort: equal times keep the order found
            return sorted(runs, key=lambda r: (r / marker).stat().st_mtime, reverse=True)[:limit]
        return sorted(runs)[:limit]

    @classmethod
    def latest(cls, root: Path | str, **find) -> Path | None:
        """The last of find(root, **find) in path order — under <date>/<time>/ folders (the
        names mens gives its runs), the newest; None when there is none."""
        runs = cls.find(root, **find)
        return runs[-1] if runs else None

    # --- writes (rank 0 only, atomic) -------------------------------------------------------
    def write_text(self, name: str, text: str) -> Path:
        path = self.path / name
        if rank_zero():
            atomic_write(path, text)
        return path

    def write_json(self, name: str, obj, indent: int | None = 2) -> Path:
        return self.write_text(name, json.dumps(obj, indent=indent))

    def save_dir(self, name: str, save: Callable[[Path], None]) -> Path:
        """save(tmp) fills a temp folder, renamed to <run dir>/name when complete."""
        final, tmp = self.path / name, self.path / f".{name}.tmp"
        if rank_zero():
            shutil.rmtree(tmp, ignore_errors=True)
            save(tmp)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
        return final

    # --- reads -------------------------------------------------------------------------------
    def read_json(self, name: str) -> dict:
        path = self.path / name
        return json.loads(path.read_text()) if path.is_file() else {}

    def read_spec(self) -> dict:
        """spec.yaml as plain data ({} when absent)."""
        import yaml
        return (yaml.safe_load(self.spec.read_text()) or {}) if self.spec.is_file() else {}

    def read_summary(self) -> dict:
        return self.read_json(self.SUMMARY)

    def telemetry_rows(self, event: str | None = None) -> list[dict]:
        """telemetry.jsonl's rows (of one event), through mens.run.telemetry's reader."""
        return read_telemetry(self.telemetry, event)


def artifact_name(lane: str) -> str:
    """The dir a lane's training saves: model/ for the full lane, adapter/ for the others."""
    return RunDir.MODEL if lane == "full" else RunDir.ADAPTER


def wandb_artifact(kind: str, wandb_id: str) -> str:
    """The wandb artifact training logs its weights as (mens.train.loggers.log_weights); export
    and compare use it by this name. kind: RunDir.ADAPTER or RunDir.MODEL."""
    return f"{kind}-{wandb_id}"
