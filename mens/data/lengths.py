"""Token lengths of the user's data, measured before planning with the run's own tokenizer
(the `tokenizers` library on tokenizer.json) and chat template (jinja2, mens.data.template) —
no torch, no transformers — and cached by content, so a second plan is instant.

What the plan takes from them: `train.seq_len=auto` is the 99th percentile rounded up to a
multiple of 128 (at most the model's positions), and every record that a window would cut is
counted: `truncated` (some tokens beyond seq_len) and `unsupervised` (its first supervised
token lies beyond seq_len: it has nothing to learn from and is skipped in training).
The cache key is the sha256 of the records' ids (content hashes), the tokenizer.json bytes and
the template text: any change to data, tokenizer or template measures again.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from mens.data.formats import kind, turns

IGNORE = -100   # as mens.data.pack (which imports torch: not for planning)

ROUND = 128


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mens" / "lengths"


def percentile(xs: list[int], q: float) -> int:
    if not xs:
        return 0
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * (len(s) - 1)))))]


def measure_records(records: list[dict], encoder) -> list[tuple[int, int]]:
    """[(tokens, index of the first supervised token)] per record; a pair counts its longer
    side (chosen or rejected), as training pads the pair to it."""
    out = []
    for r in records:
        k = kind(r)
        sides = [turns(r, "chosen"), turns(r, "rejected")] if k == "pair" \
            else [None] if k == "text" else [turns(r)]
        best = (0, 0)
        for msgs in sides:
            if msgs is None:
                ids = encoder.text_ids(r["text"])
                best = max(best, (len(ids), 1))
                continue
            ids, labels = encoder.encode(msgs, None, None, r.get("tools"))
            first = next((i for i, x in enumerate(labels) if x != IGNORE), len(labels))
            best = max(best, (len(ids), first))
        out.append(best)
    return out


def lengths(dataset, encoder) -> dict:
    """{"train": [(tokens, first supervised)], "eval": […]} for a Dataset, cached."""
    h = hashlib.sha256()
    for r in dataset.train + dataset.eval:
        h.update(r["id"].encode())
    h.update(encoder.fingerprint().encode())
    key = h.hexdigest()[:32]
    path = cache_dir() / f"{key}.json"
    if path.is_file():
        try:
            return json.loads(path.read_text())
        except ValueError:
            pass   # a damaged cache entry is measured again
    out = {"train": measure_records(dataset.train, encoder),
           "eval": measure_records(dataset.eval, encoder)}
    path.parent.mkdir(parents=True, exist_ok=True)
    from mens.run.rundir import atomic_write
    atomic_write(path, json.dumps(out))
    return out


def summary(lens: list, seq_len: int) -> dict:
    tokens = [t for t, _ in lens]
    return {"records": len(lens), "p50": percentile(tokens, 50), "p90": percentile(tokens, 90),
            "p99": percentile(tokens, 99), "max": max(tokens, default=0),
            "truncated": sum(t > seq_len for t in tokens),
            "unsupervised": sum(first >= seq_len for _, first in lens)}


def encoder(cfg):
    """The run's RunEncoder from the model's files (fetched alone when allowed), or None."""
    from mens.data.encoder import RunEncoder
    from mens.source.resolve import meta_dir

    from mens.errors import ConfigError

    try:
        d = meta_dir(cfg.rung, allow_fetch=True)
    except ConfigError:   # offline, or not allowed to fetch: lengths are estimated (said)
        return None
    return RunEncoder.load(d, cfg.data) if d is not None else None


def estimate(dataset) -> list:
    """No tokenizer here (offline, nothing cached): characters / 3.5, said in the notes."""
    from mens.data.formats import words
    return [(int(len(" ".join(words(r))) / 3.5) + 8, 0) for r in dataset.train]


def auto_seq_len(cfg, dataset, notes: list[str]) -> int:
    """train.seq_len=auto for the user's data: p99 rounded up to 128, capped at positions."""
    enc = encoder(cfg)
    if enc is None:
        lens = estimate(dataset)
        notes.append("seq_len: the model's tokenizer is not here; lengths are estimated from "
                     "characters (3.5 per token)")
    else:
        lens = lengths(dataset, enc)["train"]
    p99 = percentile([t for t, _ in lens], 99)
    seq = max(ROUND, -(-p99 // ROUND) * ROUND)
    max_pos = cfg.rung.max_position_embeddings
    if seq > max_pos:
        notes.append(f"seq_len: capped {seq} → {max_pos} (the model's max positions)")
        seq = max_pos
    _say(lens, seq, notes, f"seq_len auto = {seq} (p99 {p99} tokens)")
    return seq


def report(cfg, dataset, seq_len: int, notes: list[str]) -> None:
    """An explicit seq_len: say what it cuts."""
    enc = encoder(cfg)
    if enc is not None:
        _say(lengths(dataset, enc)["train"], seq_len, notes, f"seq_len {seq_len}")


def _say(lens, seq: int, notes: list[str], head: str) -> None:
    s = summary(lens, seq)
    if s["truncated"] or s["unsupervised"]:
        notes.append(f"data: {head}: {s['truncated']} of {s['records']} training records are "
                     f"cut at the window, {s['unsupervised']} of them with no answer token "
                     f"left (skipped in training)")
