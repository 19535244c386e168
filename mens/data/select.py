"""What a run trains and scores on: the spoke's shipped corpus (`data=spoke`) or the user's data
(`data=file` / `data=hf`, mens.data.sources), behind one interface for train, evaluate, compare
and inspect. With user data the spoke supplies only the collateral eval (`data.collateral=none`
skips it). No torch.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from mens.data.corpus import load_eval, load_spoke
from mens.data.formats import kind


def _get(cfg, key, default=None):
    return cfg.get(key, default) if isinstance(cfg, dict) else getattr(cfg, key, default)


def user_data(spec) -> bool:
    data = getattr(spec, "data", None)
    return data is not None and _get(data, "source", "spoke") != "spoke"


def data_label(data) -> str:
    """A short name for the data: `file:<stem>` of its first file, or the dataset id."""
    if _get(data, "source") == "hf":
        return str(_get(data, "name"))
    path = _get(data, "path")
    first = path if isinstance(path, str) else (list(path or []) or ["?"])[0]
    return f"file:{Path(str(first)).stem.replace('*', 'all')}"


def _plain(v):
    """A frozen spec section (dataclass of tuples) or a DictConfig → plain JSON-able values."""
    from dataclasses import asdict, is_dataclass

    if is_dataclass(v):
        return {k: _plain(x) for k, x in asdict(v).items()}
    if hasattr(v, "items"):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)) or type(v).__name__ == "ListConfig":
        return [_plain(x) for x in v]
    return v


@lru_cache(maxsize=8)
def _dataset(data_json: str, phases: tuple, stamp: tuple):
    from mens.data.sources import read_split

    return read_split(json.loads(data_json), phases)


def _stamp(data: dict) -> tuple:
    """The files' (path, size, mtime): a file that changes is read again."""
    import glob
    import os

    out = []
    for key in ("path", "eval_path"):
        v = data.get(key) if data.get("source") == "file" else None
        for item in [v] if isinstance(v, str) else list(v or []):
            for p in sorted(glob.glob(str(item))):
                st = os.stat(p)
                out.append((p, st.st_size, st.st_mtime_ns))
    return tuple(out)


def dataset(data, c, phases) -> object:
    """mens.data.sources.Dataset of a `data` section for the objective whose card is `c`
    (mens.config.objectives.card): read and split once per process while its files are
    unchanged (plan and train read them once), then fitted to the objective."""
    from mens.data.sources import for_objective

    plain = _plain(data)
    return for_objective(_dataset(json.dumps(plain, sort_keys=True), tuple(phases),
                                  _stamp(plain)), c)


def spoke_records(records: list[dict], c) -> tuple[list[dict], int]:
    """(records the objective whose card is `c` trains on, how many were left out) of a spoke's
    corpus: its card's record kind, converted from one it accepts (KTO unpairs pairs)."""
    from mens.data.formats import unpair

    pairs = "pairs" in c.record_kinds() and "chat" not in c.record_kinds()
    kept = [r for r in records if (kind(r) == "pair") == pairs]   # pairs, or SFT: the rest
    left = len(records) - len(kept)
    return (unpair(kept) if c.record == "labeled" else kept), left


def run_records(spec) -> tuple[tuple[list[dict], dict, str], dict]:
    """(train_records, eval_records) of a run: the data stage asks the objective's card here,
    once, and both sides are fitted to it."""
    from mens.config.objectives import card

    c = card(spec.lane)
    return _train(spec, c), _held(spec, c)


def train_records(spec) -> tuple[list[dict], dict, str]:
    """(records, stats, label): the records this run trains on (the objective's card says
    which kind: pairs for dpo, SFT chats for sft …)."""
    from mens.config.objectives import card

    return _train(spec, card(spec.lane))


def _train(spec, c) -> tuple[list[dict], dict, str]:
    if user_data(spec):
        ds = dataset(spec.data, c, spec.curriculum.phases)
        stats = {k: v for k, v in ds.stats.items()}
        return list(ds.train), stats, data_label(spec.data)
    records, stats = load_spoke(spec.spoke, split="train", seed=spec.train.seed)
    kept, left = spoke_records(records, c)
    pairs = "chat" not in c.record_kinds()
    stats[f"excluded_{'sft' if pairs else 'pair'}_records"] = left
    return kept, stats, spec.spoke.name


def collateral_spoke(name: str) -> str:
    from mens.config.options import spokes

    names = spokes()
    return names[(names.index(name) + 1) % len(names)]


def eval_records(spec) -> dict:
    """{role: (label, records)}: "eval" (the data's own held-out split; pairs for dpo on user
    data) and "collateral" (another spoke's held-out chats), unless data.collateral=none."""
    from mens.config.objectives import card

    return _held(spec, card(spec.lane))


def _held(spec, c) -> dict:
    from mens.config.options import load_option

    if user_data(spec):
        ds = dataset(spec.data, c, spec.curriculum.phases)
        out = {"eval": (data_label(spec.data), list(ds.eval))}
        if _get(spec.data, "collateral", "spoke") == "none":
            return out
        other = spec.spoke.name   # the spoke the user's data stands in for
    else:
        out = {"eval": (spec.spoke.name, _chats(load_eval(spec.spoke)))}
        other = collateral_spoke(spec.spoke.name)
    out["collateral"] = (other, _chats(load_eval(load_option("spoke", other))))
    return out


def _chats(records: list[dict]) -> list[dict]:
    return [r for r in records if kind(r) == "chat"]


def lock_changes(before, after) -> list[str]:
    """What changed between two data locks (spec.yaml's data_lock): files whose sha256
    differs, appeared or went; datasets whose revision or fingerprint differs."""
    def key(x):
        return x.get("path") or x.get("corpus") or f"{x.get('dataset')}[{x.get('split')}]"
    old, new = {key(x): x for x in before or []}, {key(x): x for x in after or []}
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if a is None:
            out.append(f"data file {k} is new")
        elif b is None:
            out.append(f"data file {k} is no longer used")
        elif a.get("sha256") != b.get("sha256") and "sha256" in a:
            out.append(f"data file {k} changed: sha256 {a['sha256'][:12]}… → "
                       f"{str(b.get('sha256'))[:12]}…")
        elif "dataset" in a and (a.get("revision"), a.get("fingerprint")) != \
                (b.get("revision"), b.get("fingerprint")):
            out.append(f"dataset {k} changed: revision/fingerprint {a.get('revision')}/"
                       f"{a.get('fingerprint')} → {b.get('revision')}/{b.get('fingerprint')}")
    return out
