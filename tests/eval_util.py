"""Fixture eval.json / gate.json files in the shapes `mens eval` and `mens gate` write
(mens/eval/__init__.py's metric row), for the tests of what shows them (compare, studio,
ladder). The numbers are not typed in: each row is mens.eval.stats.paired() over per-item
scores, so its intervals are the ones the stage would compute for those items."""
from __future__ import annotations

import json
import time
from pathlib import Path

from mens.eval.stats import paired
from mens.run.receipt import RECEIPT, artifact_sha256


def metric_row(name: str, group: str, base: list[float], tuned: list[float],
               higher_is_better: bool = True, relative: bool = False, version="1.0",
               spoke: str | None = None) -> dict:
    task, _, metric = name.partition("/")
    return {"name": name, "group": group, "task": task, "metric": metric or name,
            "spoke": spoke, "higher_is_better": higher_is_better,
            **paired(base, tuned, higher_is_better=higher_is_better, relative=relative,
                     reps=500),
            "version": version}


def rows_a() -> list[dict]:
    """A run that learned its spoke (pass@1 up) and lost a little on a benchmark."""
    return [
        metric_row("vox_lang/pass@1", "in_domain", [1] * 6 + [0] * 14, [1] * 14 + [0] * 6,
                   spoke="vox_lang"),
        metric_row("arc_easy/acc", "benchmark", [1, 0, 1, 1, 0, 1, 0, 1, 1, 0] * 3,
                   [1, 0, 1, 0, 0, 1, 0, 1, 1, 0] * 3),
        metric_row("code_en/loss", "collateral", [2.0, 2.4, 1.8, 2.2, 2.6, 2.1],
                   [2.1, 2.5, 1.9, 2.2, 2.7, 2.2], higher_is_better=False, relative=True),
    ]


def rows_b() -> list[dict]:
    """A second run: the same in-domain metric, no benchmark, and a judge row."""
    return [
        metric_row("vox_lang/pass@1", "in_domain", [1] * 6 + [0] * 14, [1] * 8 + [0] * 12,
                   spoke="vox_lang"),
        metric_row("judge/win_rate", "judge", [0.5] * 10, [1, 1, 0, 1, 0.5, 1, 1, 0, 1, 1]),
    ]


def write_eval(run: Path, rows: list[dict], spoke: str = "vox_lang") -> Path:
    run = Path(run)
    run.mkdir(parents=True, exist_ok=True)
    data = {"kind": "mens.eval", "version": 1, "run": str(run), "rung": "tiny", "spoke": spoke,
            "lane": "lora", "artifact_sha256": artifact_sha256(run), "models": ["base", "tuned"],
            "spec": {"tasks": sorted({r["task"] for r in rows})}, "rows": rows,
            "created": time.time(), "duration_s": 1.0}
    path = run / "eval.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def write_gate(run: Path, row: dict, verdict: str = "pass", reasons: list[str] | None = None,
               guards: list[dict] | None = None) -> Path:
    """gate.json naming the run's artifact bytes as they are now (so it is not void)."""
    run = Path(run)
    receipt = {"run": str(run), "rung": "tiny", "rung_commit": None, "spoke": "vox_lang",
               "lane": "lora", "artifact_sha256": artifact_sha256(run), "verdict": verdict,
               "reasons": reasons or [], "thresholds": {"min_gain": 0.0},
               "metric": row["metric"], "in_domain": row, "guards": guards or [],
               "eval": {"path": str(run / "eval.json"), "sha256": None, "spec": {},
                        "task_versions": {}, "items": {row["name"]: row["n"]}},
               "corpus_lock": {}, "created": time.time(), "duration_s": 1.0}
    path = run / RECEIPT
    path.write_text(json.dumps(receipt, indent=2))
    return path


def fake_adapter(run: Path) -> Path:
    """An adapter/ dir with a config and bytes: enough for artifact_sha256 (not loadable)."""
    a = Path(run) / "adapter"
    a.mkdir(parents=True, exist_ok=True)
    (a / "adapter_config.json").write_text("{}")
    (a / "adapter_model.safetensors").write_bytes(b"weights of " + str(run).encode())
    return a
