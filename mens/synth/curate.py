"""`mens data curate ACTION [overrides]`: look at and curate a dataset dir (mens.synth.dataset).

    list     the records the filter selects (one line each), counts by verdict and tag
    rate     curate.rating=1..5 on every record the filter selects
    tag      add curate.tags to them          untag   remove curate.tags from them
    edit     curate.response=TEXT replaces their answer; the original is kept in `edits`
    clean    near-duplicate removal and decontamination against every eval split

The filter: curate.topic (a topic-path prefix: `loops`, or `pipelines/jq`), curate.tag,
curate.verdict (passed | repaired | unverified), curate.min_rating, curate.id. A write
(rate/tag/untag/edit) needs at least one filter key: a whole-dataset change is spelled out
(`curate.tag=train_sft`), never a default.

`clean` (also run at the end of every `mens data synth`) follows mens.data.clean's one policy,
remove and count: a record whose word n-grams are ≥ curate.near_dup similar (Jaccard) to an
earlier one is removed (MinHash LSH from `datasketch` proposes candidates, the exact Jaccard
decides; without datasketch every pair is compared, said once), and a record contaminated by an
eval split — the spoke's shipped eval.jsonl, the records tagged eval_golden, and every
curate.eval file — is removed (clean.decontaminate with data.decontam_n / decontam_threshold).
Removed records go to quarantine.jsonl with the reason; the counts go to stats.json.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from mens.synth import dataset as ds
from mens.data.formats import chat
from mens.errors import ConfigError

ACTIONS = ("list", "rate", "tag", "untag", "edit", "clean")
FILTERS = ("topic", "tag", "verdict", "min_rating", "id")


def selects(rec: dict, c) -> bool:
    if c.id is not None and rec.get("id") != c.id:
        return False
    if c.tag is not None and c.tag not in (rec.get("tags") or []):
        return False
    if c.verdict is not None and rec.get("verdict") != c.verdict:
        return False
    if c.min_rating is not None and not (isinstance(rec.get("rating"), (int, float))
                                         and rec["rating"] >= c.min_rating):
        return False
    if c.topic is not None:
        want = [t for t in c.topic.split("/") if t]
        have = [str(t) for t in rec.get("topic") or []]
        leaf = str(rec.get("leaf") or "")
        if have[:len(want)] != want and not (leaf == c.topic or leaf.startswith(c.topic + "/")):
            return False
    return True


def curate(cfg, action: str, log=print) -> dict:
    if action not in ACTIONS:
        raise ConfigError(f"`mens data curate {action}`: the actions are {', '.join(ACTIONS)}.",
                          key="curate")
    out = ds.dataset_dir(cfg)
    path = out / ds.RECORDS
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: run `mens data synth spoke={cfg.spoke.name}` "
                          f"first, or point `synth.out` at a dataset dir.", key="synth.out")
    if action == "clean":
        result = clean_dataset(cfg, out)
        ds.write_stats(out, None, None, cfg, cleaned=result)
        log(f"mens data curate clean: {json.dumps(result)}")
        return result
    c = cfg.curate
    records = ds.read_jsonl(path)
    chosen = [r for r in records if selects(r, c)]
    if action == "list":
        for r in chosen:
            user = next((m["content"] for m in chat(r) if m["role"] == "user"), "")
            log(f"{r.get('id')}  {r.get('verdict', '-'):10} rating {r.get('rating')}  "
                f"[{','.join(r.get('tags') or [])}]  {'/'.join(r.get('topic') or [])}: "
                f"{' '.join(user.split())[:80]}")
        log(f"{len(chosen)} of {len(records)} records")
        return {"selected": len(chosen), "records": len(records)}
    if all(getattr(c, k) is None for k in FILTERS):
        raise ConfigError(f"`mens data curate {action}` changes the records a filter selects, "
                          f"and none is given: set one of "
                          f"{', '.join('curate.' + k for k in FILTERS)} (every record: "
                          f"`curate.tag=train_sft`).", key="curate")
    for r in chosen:
        _apply(r, action, c)
    ds.write_jsonl(path, records)
    log(f"mens data curate {action}: {len(chosen)} of {len(records)} records changed")
    return {"changed": len(chosen), "records": len(records)}


def _apply(r: dict, action: str, c) -> None:
    if action == "rate":
        if c.rating is None:
            raise ConfigError("`mens data curate rate` needs `curate.rating=1..5`.",
                              key="curate.rating")
        r["rating"] = int(c.rating)
    elif action in ("tag", "untag"):
        if not c.tags:
            raise ConfigError(f"`mens data curate {action}` needs `curate.tags=[NAME,...]` (split "
                              f"tags: {', '.join(ds.SPLIT_TAGS)}).", key="curate.tags")
        tags = list(r.get("tags") or [])
        r["tags"] = ([*tags, *(t for t in c.tags if t not in tags)] if action == "tag"
                     else [t for t in tags if t not in c.tags])
    elif action == "edit":
        if c.response is None:
            raise ConfigError("`mens data curate edit` needs `curate.response=TEXT`, the new "
                              "answer.", key="curate.response")
        answers = [m for m in chat(r) if m["role"] == "assistant"]
        if answers:
            r.setdefault("edits", []).append({"at": ds.now(), "original": answers[-1]["content"]})
            answers[-1]["content"] = c.response


# --- clean ---------------------------------------------------------------------------------
def eval_records(cfg, records: list[dict]) -> list[dict]:
    """Every eval split the dataset must stay clear of."""
    from mens.data.corpus import load_eval
    from mens.errors import DataError

    try:
        held = list(load_eval(cfg.spoke))
    except DataError:       # a spoke without a shipped corpus
        held = []
    held += [r for r in records if "eval_golden" in (r.get("tags") or [])]
    for f in cfg.curate.eval:
        held += ds.read_jsonl(Path(f))
    return held


def clean_dataset(cfg, out: Path) -> dict:
    """Near-duplicates and contaminated training records out of records.jsonl (into
    quarantine.jsonl, with the reason). → counts."""
    from mens.data.clean import decontaminate

    path = out / ds.RECORDS
    records = ds.read_jsonl(path)
    c = cfg.curate
    golden = [r for r in records if "eval_golden" in (r.get("tags") or [])]
    train = [r for r in records if "eval_golden" not in (r.get("tags") or [])]
    keep, dups = near_duplicates(train, c.near_dup_n, c.near_dup)
    n, thr = int(cfg.data.decontam_n), float(cfg.data.decontam_threshold)
    # the same function as the held-out split's check, the other way round: a TRAINING record
    # that shares `thr` of its n-grams with any eval record goes
    keep, dirty = decontaminate(keep, eval_records(cfg, records), n, thr, ds.words)
    if dups or dirty:
        q = ds.read_jsonl(out / ds.QUARANTINE)
        q += [{**r, "tags": ["quarantine"], "reason": f"near-duplicate of {of}"} for r, of in dups]
        q += [{**r, "tags": ["quarantine"], "reason": "contaminated: shares "
               f"{thr:g} of its {n}-grams with an eval split"} for r in dirty]
        ds.write_jsonl(out / ds.QUARANTINE, q)
        ds.write_jsonl(path, keep + golden)
    return {"records": len(keep) + len(golden), "near_duplicates": len(dups),
            "contaminated": len(dirty), "near_dup": c.near_dup, "near_dup_n": c.near_dup_n,
            "decontam_n": n, "decontam_threshold": thr}


def _shingles(rec: dict, n: int) -> set[str]:
    w = [x.lower() for x in ds.words(rec)]
    return {" ".join(w[i:i + n]) for i in range(max(1, len(w) - n + 1))}


def near_duplicates(records: list[dict], n: int, threshold: float
                    ) -> tuple[list[dict], list[tuple[dict, str]]]:
    """(kept, [(removed, id of the earlier record it repeats)]) — first one wins."""
    sh = [_shingles(r, n) for r in records]
    try:
        from datasketch import MinHash, MinHashLSH
    except ImportError:
        MinHash = None
        print("mens: note: datasketch is not installed: near-duplicates are found by comparing "
              "every pair (fine for thousands of records; `pip install datasketch` for more)",
              file=sys.stderr)
    kept_idx: list[int] = []
    removed: list[tuple[dict, str]] = []
    # LSH at the threshold misses a pair just above it often (banding is an S-curve): candidates
    # come from a band set for a lower similarity, the exact Jaccard decides
    lsh = MinHashLSH(threshold=max(0.1, threshold - 0.3), num_perm=128) if MinHash else None
    for i, s in enumerate(sh):
        if lsh is not None:
            m = MinHash(num_perm=128, seed=1)
            for g in s:
                m.update(g.encode())
            cands = sorted(int(k) for k in lsh.query(m))
        else:
            m, cands = None, kept_idx
        hit = next((j for j in cands if _jaccard(s, sh[j]) >= threshold), None)
        if hit is None:
            kept_idx.append(i)
            if lsh is not None:
                lsh.insert(str(i), m)
        else:
            removed.append((records[i], records[hit].get("id")))
    return [records[i] for i in kept_idx], removed


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / max(1, len(a | b))
