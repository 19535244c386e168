"""A data-studio dataset is a directory (`synth.out=DIR`, default `datasets/<spoke>/`):

    tree.yaml          the topic tree (mens.synth.tree), human-editable
    records.jsonl      SFT records: OpenAI chat `messages` + provenance, rating, tags — readable
                       as is by `data=file data.path=DIR/records.jsonl`
    pairs.jsonl        repair pairs: prompt (messages) / chosen / rejected (assistant turns) +
                       provenance — `lane=dpo data=file data.path=DIR/pairs.jsonl`
    quarantine.jsonl   candidates that never passed the oracle (and records `clean` removed),
                       with their diagnostics
    stats.json         the teacher ledger (per-teacher calls, invalid outputs, tokens, cost) and
                       the synthesis / cleaning counts
    .synth/leaves/     one JSON per finished leaf (the resume points of `mens data synth`)

Every file is written whole under a temp name, fsync'd and renamed: a crash leaves the old file
or the new one, never half of one. No provenance field may be called `chosen`, `rejected`,
`prompt`/`completion`, `conversations` or `text`: those keys decide a record's format.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from mens.data.formats import chat, turns
from mens.errors import DataError

RECORDS, PAIRS, QUARANTINE, TREE, STATS = ("records.jsonl", "pairs.jsonl", "quarantine.jsonl",
                                           "tree.yaml", "stats.json")
SPLIT_TAGS = ("train_sft", "train_dpo", "eval_golden", "canary", "quarantine")
ORIGINS = ("topic_tree_synth", "template", "import")


def default_dir(spoke: str) -> Path:
    return Path("datasets") / spoke


def dataset_dir(cfg) -> Path:
    """`synth.out`, else datasets/<spoke> (relative to where the command runs)."""
    out = cfg.synth.out
    return Path(out) if out else default_dir(cfg.spoke.name)


def write_durable(path: Path, text: str) -> Path:
    """temp + fsync + rename (+ fsync of the directory): survives a SIGKILL or a power cut."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    try:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:      # a filesystem that cannot fsync a directory: the rename still holds
        pass
    return path


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"not JSON ({e.msg}, column {e.colno}); fix or remove the line.",
                            path=path, line=n, key="record") from None
        if not isinstance(rec, dict):
            raise DataError("a record must be a JSON object.", path=path, line=n, key="record")
        out.append(rec)
    return out


def write_jsonl(path: Path, records: list[dict]) -> Path:
    return write_durable(path, "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                       for r in records))


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def answer(rec: dict) -> str:
    """The record's (last) assistant answer."""
    msgs = [m for m in chat(rec) if m.get("role") == "assistant"]
    return msgs[-1].get("content", "") if msgs else ""


def words(rec: dict) -> list[str]:
    """Every word of a record's own texts (messages, or a pair's prompt and chosen) — not its
    system turn: a spoke's one system prompt is in every record and would make all alike."""
    msgs = turns(rec)
    if isinstance(msgs, str):
        return msgs.split()
    return " ".join(m.get("content") or "" for m in msgs
                    if isinstance(m, dict) and m.get("role") != "system").split()


def write_stats(out: Path, ledger, counts, cfg, **more) -> None:
    """stats.json: this run's teacher ledger (no key, ever: only env var names) and counts;
    earlier runs' stay under `runs`."""
    path = out / STATS
    stats = json.loads(path.read_text()) if path.is_file() else {"runs": []}
    if ledger is not None:
        stats["teacher"] = ledger.as_dict()
        stats["runs"].append({"at": now(), "strategy": cfg.synth.strategy,
                              "counts": counts, "teacher_totals": stats["teacher"]["totals"]})
    stats.update(more)
    write_durable(path, json.dumps(stats, indent=2) + "\n")
