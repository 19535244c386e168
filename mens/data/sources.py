"""A user's data (`data=file` / `data=hf`) → train and eval records in mens's form, stats, and a
lock naming the data by content (each file's sha256, or the dataset's name and revision).

    read (JSONL/JSON/Parquet/CSV, or `datasets`) → rename columns → detect/normalize format
    → rating/tag filters → ids → dedup → eval split (eval_path | `eval_golden` tag | hash
    fraction) → decontaminate eval against train

Every bad input raises DataError naming file:line (or dataset row), the field and the format
expected; every filter counts what it removed. JSON, JSONL and CSV are read with the standard
library (exact line numbers, strict UTF-8), Parquet with pyarrow; planning imports no torch.
"""
from __future__ import annotations

import csv
import glob
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from mens.data import clean
from mens.run.hashing import sha256
from mens.data.formats import (DATA_KIND, EXPECTED, Bad, detect, normalize, rename, tool_calls,
                               unpair, words)
from mens.data.tools import ToolError, normalize_tools
from mens.errors import DataError

EXTENSIONS = (".jsonl", ".json", ".parquet", ".csv")
GOLDEN = "eval_golden"


@dataclass
class Dataset:
    train: list[dict]
    eval: list[dict]
    kind: str                        # sft | text | preference
    format: str
    stats: dict = field(default_factory=dict)
    lock: list[dict] = field(default_factory=list)   # [{path, sha256}] or [{dataset, revision}]


def _get(data, key, default=None):
    return data.get(key, default) if isinstance(data, dict) else getattr(data, key, default)


def expand(paths, key: str = "data.path") -> list[Path]:
    """A path, a list of paths, or globs → existing files, sorted within each glob."""
    items = [paths] if isinstance(paths, str) else list(paths or [])
    if not items:
        raise DataError(f"`{key}` is empty: give a file, a list of files or a glob "
                        f"(e.g. `{key}=train.jsonl`).", key=key)
    out: list[Path] = []
    for item in items:
        item = str(item)
        hits = sorted(glob.glob(item)) if glob.has_magic(item) else [item]
        if not hits or not Path(hits[0]).exists():
            raise DataError(f"no such file (`{key}`). Check the path; it is relative to the "
                            f"directory you run mens from.", item, key=key)
        for h in hits:
            p = Path(h)
            if p.is_dir():
                raise DataError(f"{p} is a directory: give its files or a glob like "
                                f"`{key}='{p}/*.jsonl'`.", p, key=key)
            if p.suffix.lower() not in EXTENSIONS:
                raise DataError(f"{p}: unsupported file type {p.suffix or '(none)'}; mens reads "
                                f"{', '.join(EXTENSIONS)}.", p, key=key)
            out.append(p)
    return out


def _decode(raw: bytes, path: Path, line: int | None) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"invalid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start}"
                        f"{' of the line' if line else ''}): mens reads UTF-8 text. Re-encode the "
                        f"file (e.g. `iconv -f latin1 -t utf-8`).", path, line) from None


def read_file(path: Path):
    """Yield (line or row number, record) — JSONL/CSV by line, JSON/Parquet by row (1-based)."""
    ext = path.suffix.lower()
    if ext == ".jsonl":
        with open(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                text = _decode(raw, path, n)
                if text.strip():
                    try:
                        yield n, json.loads(text)
                    except json.JSONDecodeError as e:
                        raise DataError(f"line is not valid JSON ({e.msg}, column {e.colno}): "
                                        f"JSONL holds one JSON object per line.", path, n) from None
    elif ext == ".json":
        text = _decode(path.read_bytes(), path, None)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"not valid JSON ({e.msg}).", path, e.lineno) from None
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            data = data["data"]
        if not isinstance(data, list):
            raise DataError("a JSON data file must hold a list of records (or {\"data\": [...]}); "
                            "for one record per line use .jsonl.", path)
        yield from enumerate(data, 1)
    elif ext == ".csv":
        text = _decode(path.read_bytes(), path, None)
        reader = csv.DictReader(io.StringIO(text, newline=""))
        for row in reader:
            yield reader.line_num, {k: _cell(v) for k, v in row.items() if k is not None}
    else:
        import pyarrow.parquet as pq   # pyarrow: what `datasets` itself reads Parquet with

        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as e:   # noqa: BLE001 - pyarrow raises several types for a bad file
            raise DataError(f"not a readable Parquet file ({e}).", path) from None
        yield from enumerate(rows, 1)


def _file_lock(p: Path) -> dict:
    """A data file named by content: one entry of the run's data lock."""
    return {"path": str(p), "sha256": sha256(p), "bytes": p.stat().st_size}


def _cell(v: str):
    """CSV cells are strings; a cell holding a JSON list/object (e.g. messages) is parsed."""
    s = v.strip() if isinstance(v, str) else v
    if isinstance(s, str) and s[:1] in "[{":
        try:
            return json.loads(s)
        except json.JSONDecodeError:
            return v
    return v


def _read_hf(data, split: str):
    """Yield (row, record) from a Hugging Face dataset (cached by `datasets`)."""
    import os

    name, revision = _get(data, "name"), _get(data, "revision")
    try:
        import datasets
        ds = datasets.load_dataset(name, split=split, revision=revision)
    except Exception as e:   # noqa: BLE001 - datasets raises many types; all are the data's
        offline = os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get(
            "HF_HUB_OFFLINE") == "1"
        how = ("offline (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE=1) and not in the datasets cache"
               if offline else f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
        raise DataError(f"dataset {name} (split {split}, revision {revision or 'main'}) could "
                        f"not be loaded: {how}. Check `data.name`/`data.split`, or download it "
                        f"on a connected machine (`hf download {name} --repo-type dataset`) and "
                        f"copy the cache.", key="data.name") from None
    for n, row in enumerate(ds, 1):
        yield n, row
    yield None, getattr(ds, "_fingerprint", None)   # the last item: the dataset's fingerprint


def load_records(data, phases=("warmup",), which: str = "train") -> tuple[list[dict], str, dict,
                                                                          list[dict]]:
    """(records, format, stats, lock) of `data.path` / `data.name` (which=train) or of
    `data.eval_path` (which=eval). Records carry id, where, rating, tags, difficulty, phase."""
    fmt_cfg, columns = _get(data, "format", "auto"), dict(_get(data, "columns", {}) or {})
    system = _get(data, "system_prompt")
    source = _get(data, "source")
    lock: list[dict] = []
    if source == "hf":
        split = _get(data, "split") if which == "train" else _get(data, "eval_path")
        rows = _read_hf(data, split)
        label = f"{_get(data, 'name')}[{split}]"
        feeds = [(label, rows, "row")]
        hf_split = split
    else:
        key = "data.path" if which == "train" else "data.eval_path"
        files = expand(_get(data, "path" if which == "train" else "eval_path"), key)
        feeds = [(str(p), read_file(p), "line" if p.suffix.lower() in (".jsonl", ".csv")
                  else "record") for p in files]
        lock = [_file_lock(p) for p in files]
    fmt, records, stats = None, [], {"read": 0, "below_min_rating": 0, "tag_filtered": 0}
    first = None
    shared_tools = dataset_tools(data)
    skip_bad = _get(data, "on_bad", "error") == "skip"
    min_rating, tags = _get(data, "min_rating"), set(_get(data, "tags", []) or [])
    for label, rows, unit in feeds:
        for n, raw in rows:
            if n is None:   # an hf dataset's fingerprint
                lock.append({"dataset": _get(data, "name"), "split": hf_split,
                             "revision": _get(data, "revision") or "main", "fingerprint": raw})
                continue
            where = f"{label}:{n}" if unit == "line" else f"{label} {unit} {n}"
            rec = rename(raw, columns) if isinstance(raw, dict) else raw
            this = fmt_cfg if fmt_cfg != "auto" else (detect(rec) if isinstance(rec, dict) else None)
            if this is None:
                keys = sorted(rec) if isinstance(rec, dict) else type(rec).__name__
                raise DataError(
                    f"{where}: no known format fits this record (keys {keys}). Formats: "
                    + "; ".join(f"{k} {v}" for k, v in EXPECTED.items())
                    + ". Rename columns with `data.columns={ours: theirs}` or set `data.format`.",
                    key="data.format")
            if fmt is None:
                fmt, first = this, where
            elif this != fmt:
                raise DataError(f"{where}: mixed formats — this record is {this} but {first} was "
                                f"{fmt}. One file set holds one format; split the files or fix "
                                f"the record.", key="data.format")
            try:
                norm = normalize(rec, fmt, system, shared_tools)
            except Bad as b:
                if not skip_bad:
                    raise DataError(f"{where}: {b.why} (format {fmt}: {EXPECTED[fmt]}). To drop "
                                    f"such records and count them instead, set data.on_bad=skip.",
                                    key=f"record.{b.key}") from None
                stats["bad_skipped"] = stats.get("bad_skipped", 0) + 1   # said, never silent
                stats.setdefault("bad_examples", [])
                if len(stats["bad_examples"]) < 5:
                    stats["bad_examples"].append(f"{where}: {b.why}")
                continue
            stats["read"] += 1
            n_calls = tool_calls(norm)
            if n_calls:
                stats["tool_calls_in_data"] = stats.get("tool_calls_in_data", 0) + n_calls
            rating, rtags = rec.get("rating"), rec.get("tags") or []
            if min_rating is not None and isinstance(rating, (int, float)) and rating < min_rating:
                stats["below_min_rating"] += 1
                continue
            if tags and not tags & set(rtags if isinstance(rtags, list) else [rtags]):
                stats["tag_filtered"] += 1
                continue
            d = rec.get("difficulty")
            norm.update(id=clean.record_id(norm), where=where,
                        difficulty=d if isinstance(d, int) and 1 <= d <= 10 else 1,
                        phase=rec.get("phase") if rec.get("phase") in phases else phases[0],
                        golden=GOLDEN in (rtags if isinstance(rtags, list) else [rtags]))
            records.append(norm)
    if fmt is None:
        raise DataError(f"{', '.join(f for f, _, _ in feeds)}: no records (the file is empty).",
                        key="data.path" if source == "file" else "data.name")
    return records, fmt, stats, lock


def dataset_tools(data) -> list[dict] | None:
    """`data.tools`: one file of tool schemas (a JSON list, or JSONL with one schema a line) that
    every record without its own `tools` gets; None when unset."""
    path = _get(data, "tools")
    if not path:
        return None
    p = expand(path, "data.tools")[0]
    if p.suffix.lower() not in (".json", ".jsonl"):
        raise DataError(f"{p}: data.tools must be a .json list of tool schemas or .jsonl with one "
                        f"schema a line.", p, key="data.tools")
    rows = [r for _, r in read_file(p)]
    try:
        return normalize_tools(rows, "tools")
    except ToolError as e:
        raise DataError(f"{e.why} (data.tools).", p, key="data.tools") from None


def _empty(what: str, stats: dict, hint: str, key: str) -> DataError:
    return DataError(f"the {what} removed every record ({clean.describe(stats)}); {hint}",
                     key=key)


def load_data(data, objective: str, phases=("warmup",)) -> Dataset:
    """The whole pipeline for one objective (lane.objective, by name): read_split, then
    for_objective; raises DataError for anything the data or its filters get wrong."""
    from mens.config.objectives import card

    return for_objective(read_split(data, phases), card(objective))


def for_objective(ds: Dataset, c) -> Dataset:
    """The one point where the data meets its objective (c: its card, mens.config.card): the
    record kinds it trains on, checked, and converted where the card accepts another (KTO
    unpairs preference pairs into labeled records). A new Dataset: `ds` may be a cached one."""
    from mens.config.objectives import FOR_DATA, RECORD_OF, WANT

    have = RECORD_OF.get(ds.kind, "chat")
    if have not in c.record_kinds():
        want = " or ".join(WANT[k] for k in c.record_kinds())
        first = (ds.train or ds.eval or [{"where": "the data"}])[0]["where"]
        raise DataError(f"lane.objective={c.name} trains on {want}, but {first} is "
                        f"{ds.format}. Use lane.objective={FOR_DATA[have]} for this data, or "
                        f"give {want}.", key="data.path")
    if have != "pairs" or c.record != "labeled":
        return ds
    train, held = unpair(ds.train), unpair(ds.eval)
    stats = {**ds.stats, "unpaired": True, "train_records": len(train), "eval_records": len(held)}
    return Dataset(train, held, ds.kind, ds.format, stats, ds.lock)


def read_split(data, phases=("warmup",)) -> Dataset:
    """read → normalise → clean → split, for any objective (for_objective comes after)."""
    records, fmt, stats, lock = load_records(data, phases)
    kind = DATA_KIND.get(fmt, "sft")
    if _get(data, "tools"):   # the shared schemas are part of the data: named by content
        p = expand(_get(data, "tools"), "data.tools")[0]
        lock.append({**_file_lock(p), "role": "tools"})
    if not records and stats.get("bad_skipped") and not stats["below_min_rating"] \
            and not stats["tag_filtered"]:
        raise DataError(f"data.on_bad=skip dropped every record ({stats['bad_skipped']} bad; "
                        f"first: {stats['bad_examples'][0]}); fix the data or set "
                        f"data.on_bad=error to see each problem.", key="data.on_bad")
    if not records:
        which = "min_rating filter" if stats["below_min_rating"] else "tags filter"
        raise _empty(which, stats, "lower `data.min_rating` or change `data.tags`.",
                     "data.min_rating" if stats["below_min_rating"] else "data.tags")
    dups = 0
    if _get(data, "dedup", True):
        records, dups = clean.dedup(records)
    stats["duplicates_removed"] = dups
    if _get(data, "eval_path"):
        held, efmt, estats, elock = load_records(data, phases, which="eval")
        if DATA_KIND.get(efmt, "sft") != kind:
            raise DataError(f"`data.eval_path` holds {efmt} records but the training data is "
                            f"{fmt}: give an eval set of the same kind.", key="data.eval_path")
        train, lock, how = records, lock + [{**x, "role": "eval"} for x in elock], "eval_path"
        held, _ = clean.dedup(held)
    elif any(r["golden"] for r in records):
        train = [r for r in records if not r["golden"]]
        held, how = [r for r in records if r["golden"]], f"tag {GOLDEN}"
    else:
        frac = float(_get(data, "eval_fraction", 0.05))
        train, held, raised = clean.hold_out(records, frac)
        how = f"eval_fraction={frac:g} (by record hash)"
        if raised:   # said in the plan's notes (mens.plan.spec) and in the DATA row
            how = (f"eval_fraction={frac:g} held out none of {len(records)} records: the one "
                   f"with the lowest id hash is held out instead")
        stats["eval_minimum_applied"] = raised
    ids = {r["id"] for r in held}
    overlap = [r for r in train if r["id"] in ids]   # eval_path records also in train
    train = [r for r in train if r["id"] not in ids]
    stats["eval_duplicates_removed_from_train"] = len(overlap)
    n = int(_get(data, "decontam_n", 13))
    held, dirty = clean.decontaminate(held, train, n, float(_get(data, "decontam_threshold", 0.5)),
                                      words)
    stats.update(eval_from=how, contaminated_eval_removed=len(dirty), decontam_n=n,
                 contaminated_examples=[r["where"] for r in dirty[:5]])
    if not train:
        raise _empty("eval split", stats, "lower `data.eval_fraction` or give more records.",
                     "data.eval_fraction")
    if not held:
        hint = ("raise `data.decontam_threshold` or set `data.decontam_n=0`" if dirty else
                "raise `data.eval_fraction` or give `data.eval_path`")
        raise DataError(f"no held-out records are left ({clean.describe(stats)}; eval from "
                        f"{how}): {hint}.", key="data.eval_fraction")
    stats.update(format=fmt, kind=kind, train_records=len(train), eval_records=len(held))
    return Dataset(train, held, kind, fmt, stats, lock)
