"""Record identity, the held-out split, duplicate removal and decontamination — one policy for
all of them: **remove and count**. Nothing is dropped without a number in the stats (and the
run's DATA telemetry row), and a step that removes everything raises naming itself.

A record's id is the sha256 of its canonical content (format-independent: an Alpaca record and
the same chat in OpenAI form are the same record), so:
  * exact duplicates are records with the same id (the first one is kept);
  * the held-out split is decided by the id alone (`hash_fraction(id) < eval_fraction`): a record
    stays on its side when the file grows or is reordered;
  * a run's spec can name its data by content.
Decontamination: an eval record is contaminated when at least `threshold` of its word n-grams
occur in the training records; it is removed from eval (the held-out loss must measure
generalisation, not recall) and counted. The data studio reuses these functions.
"""
from __future__ import annotations

import hashlib
import json


def record_id(rec: dict) -> str:
    """16 hex digits of the sha256 of the record's content (roles, texts; not metadata)."""
    # tools and a labelled record's completion/label are content too (two KTO answers to one
    # prompt are two records, not a duplicate)
    body = {k: rec[k] for k in ("messages", "prompt", "chosen", "rejected", "text", "tools",
                                "completion", "label") if k in rec}
    blob = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def hash_fraction(rid: str) -> float:
    """A record id → a number in [0, 1), uniform over ids."""
    return int(hashlib.sha256(f"split/{rid}".encode()).hexdigest()[:12], 16) / 16**12


def dedup(records: list[dict]) -> tuple[list[dict], int]:
    """(records with each id once, in first-seen order; how many duplicates were removed)."""
    seen: set[str] = set()
    keep = []
    for r in records:
        if r["id"] not in seen:
            seen.add(r["id"])
            keep.append(r)
    return keep, len(records) - len(keep)


def split_by_hash(records: list[dict], fraction: float) -> tuple[list[dict], list[dict]]:
    """(train, eval): eval holds the records whose id hashes below `fraction`."""
    train, held = [], []
    for r in records:
        (held if hash_fraction(r["id"]) < fraction else train).append(r)
    return train, held


def hold_out(records: list[dict], fraction: float) -> tuple[list[dict], list[dict], bool]:
    """(train, eval, raised): split_by_hash, except that data of two or more records whose hashes
    hold out none (a fresh `mens data synth` of a few records at 5 %) holds out the one whose id
    hashes lowest — the record the fraction would take first as it grows, so the choice stays
    stable. raised: that minimum was applied (the caller says so)."""
    train, held = split_by_hash(records, fraction)
    if held or len(records) < 2:
        return train, held, False
    first = min(records, key=lambda r: hash_fraction(r["id"]))
    return [r for r in records if r is not first], [first], True


def describe(stats: dict) -> str:
    """A data-stats dict in words, for messages: "12 records read, 3 duplicates removed"."""
    words = {"read": "records read", "below_min_rating": "below data.min_rating",
             "tag_filtered": "left out by data.tags", "duplicates_removed": "duplicates removed",
             "eval_duplicates_removed_from_train": "eval records removed from train",
             "contaminated_eval_removed": "eval records removed as contaminated"}
    parts = [f"{stats[k]} {w}" for k, w in words.items() if stats.get(k)]
    return ", ".join(parts) or "no records read"


def _ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def decontaminate(held: list[dict], train: list[dict], n: int, threshold: float,
                  words) -> tuple[list[dict], list[dict]]:
    """(clean eval records, contaminated ones) — `words(rec)` gives a record's word list.

    An eval record shorter than n words is compared on its whole word sequence (as one n-gram)."""
    if n <= 0 or not held:
        return held, []
    seen: set[tuple[str, ...]] = set()
    short: set[tuple[str, ...]] = set()
    for r in train:
        w = words(r)
        seen |= _ngrams(w, n)
        if len(w) < n:
            short.add(tuple(w))
    clean, dirty = [], []
    for r in held:
        w = words(r)
        grams = _ngrams(w, n) if len(w) >= n else {tuple(w)}
        pool = seen if len(w) >= n else short | seen
        hit = sum(g in pool for g in grams) / max(len(grams), 1)
        (dirty if hit >= threshold else clean).append(r)
    return clean, dirty
