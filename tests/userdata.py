"""Users' data files, written by the tests themselves (never shipped fixtures): each format mens
reads, with content a few-million-parameter model learns in a few steps (arithmetic in fixed
sentences), so a run's held-out loss can honestly be asked to fall below the base's."""
from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = ["apple", "river", "stone", "cloud", "tiger", "maple", "glass", "ember", "north", "violet",
         "copper", "lantern", "meadow", "harbor", "falcon", "cedar", "quartz", "willow"]


def _sum(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(1, 999), rng.randint(1, 999)
    return f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."


def chat_records(n: int, seed: int = 0, multi_turn: bool = True) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        q, a = _sum(rng)
        msgs = [{"role": "system", "content": "You are a careful calculator."},
                {"role": "user", "content": q}, {"role": "assistant", "content": a}]
        if multi_turn and i % 3 == 0:
            q2, a2 = _sum(rng)
            msgs += [{"role": "user", "content": q2}, {"role": "assistant", "content": a2}]
        out.append({"messages": msgs})
    return out


def alpaca_records(n: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        w, k, n = rng.choice(WORDS), rng.randint(2, 6), rng.randint(1, 999)
        out.append({"instruction": f"Repeat the word {w} {k} times, then say {n}.", "input": "",
                    "output": " ".join([w] * k) + f", {n}."})
    return out


def sharegpt_records(n: int, seed: int = 2) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        q, a = _sum(rng)
        out.append({"conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]})
    return out


def preference_records(n: int, seed: int = 3) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        q, a = _sum(rng)
        out.append({"prompt": q, "chosen": a, "rejected": "I do not do sums, ask someone else."})
    return out


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_json(path: Path, records) -> Path:
    path.write_text(json.dumps(records, indent=1))
    return path


def write_parquet(path: Path, records) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(records), path)
    return path


def write_csv(path: Path, records) -> Path:
    import csv

    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(records[0]))
        w.writeheader()
        w.writerows(records)
    return path
