"""`mens data push synth.out=DIR push.repo=ORG/NAME`: a data-studio dataset (mens.synth.dataset)
to a Hub dataset repo that `datasets.load_dataset("ORG/NAME")` and the Hub's viewer read.

    DIR/push/                               exactly what is uploaded, rebuilt whole every time
                                            (in a temp dir beside it, then renamed into place):
      README.md                             the dataset card (mens.push.dataset_card): configs,
                                            provenance, oracle pass rates, curation, terms
      data/train-00000-of-00001.parquet     the SFT records trained on (default config)
      data/eval-00000-of-00001.parquet      the held-out records
      pairs/train-00000-of-00001.parquet    repair pairs (config `pairs`), when there are any
      quarantine/train-00000-of-00001.parquet   what never passed or `clean` removed
      tree.yaml  stats.json                 the topic tree; the teacher ledger (URLs scrubbed)
      TERMS.md                              the teachers' terms-of-use reminder (license_link)
    DIR/push.json                           the manifest: every file's size and sha256, the
                                            splits, and the last upload's result (beside the
                                            folder, not in it: a re-push of an unchanged dataset
                                            then uploads nothing)

The split is the one mens itself makes when it trains on DIR/records.jsonl (mens.data.sources):
records tagged `eval_golden` are the eval split; without any, `data.eval_fraction` is held out by
record hash (said loudly). Records tagged `quarantine` join the quarantine config. Every row keeps
its OpenAI-chat `messages` and flattened provenance columns (teacher, model, topic, leaf, oracle
verdict, repaired, rating, tags, ...); keys mens does not know are kept as JSON in `extra`.
Parquet is written by pyarrow with fixed schemas and no timestamps, so the same dataset gives the
same bytes.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.parquet as pq

from mens.errors import ConfigError
from mens.synth import dataset as ds

MANIFEST = "push.json"
SHARD = "train-00000-of-00001.parquet"
GOLDEN = "the records tagged eval_golden"
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.I)
CONTENT = ("messages", "prompt", "chosen", "rejected")
# the provenance a reader filters on stays a column even when no row fills it (unrated data)
ALWAYS = ("teacher", "model", "topic", "leaf", "verdict", "repaired", "rating", "tags")

S = pa.string()
TYPES = {  # every column a flattened row may have, in file order (`messages`-like ones: below)
    "id": S, "reason": S, "diagnostics": S, "raw": S,
    "attempts": pa.list_(pa.struct([("response", S), ("diagnostics", S)])),
    "teacher": S, "model": S, "topic": pa.list_(S), "leaf": S, "origin": S, "strategy": S,
    "verdict": S, "oracle_check": S, "oracle_passed": pa.bool_(), "oracle_diagnostics": S,
    "oracle_unverified_reason": S, "repaired": pa.bool_(), "repair_turns": pa.int64(),
    "rating": pa.float64(), "tags": pa.list_(S), "reasoning": S,
    "edits": pa.list_(pa.struct([("at", S), ("original", S)])), "created_at": S, "extra": S}


# --- rows ----------------------------------------------------------------------------------
def _s(v):
    """A text cell: strings stay, anything else (a list of content parts, a number) as JSON."""
    return v if v is None or isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def _msgs(v) -> list[dict]:
    if isinstance(v, str):          # a plain-text prompt: one user turn
        return [{"role": "user", "content": v}]
    return [{k: _s(x) for k, x in m.items()} for m in v or [] if isinstance(m, dict)]


def flatten(rec: dict) -> dict:
    """One record / pair / quarantined candidate → one row (provenance flattened)."""
    r = dict(rec)
    row = {"id": r.pop("id", None) or ds_record_id(rec)}
    for k in CONTENT:
        if k in r:
            row[k] = _msgs(r.pop(k))
    t = r.pop("teacher", None)
    row["teacher"], row["model"] = ((t.get("name"), t.get("model")) if isinstance(t, dict)
                                    else (_s(t), None))
    o = r.pop("oracle", None)
    if isinstance(o, dict):
        row.update(oracle_check=_s(o.get("check")), oracle_passed=o.get("passed"),
                   oracle_diagnostics=_s(o.get("diagnostics")),
                   oracle_unverified_reason=_s(o.get("unverified_reason")))
    row["topic"] = [str(x) for x in r.pop("topic", None) or []]
    for k in ("leaf", "origin", "strategy", "verdict", "reason", "diagnostics", "raw",
              "reasoning", "created_at"):
        row[k] = _s(r.pop(k, None))
    rating, turns = r.pop("rating", None), r.pop("repair_turns", None)
    row["rating"] = float(rating) if isinstance(rating, (int, float)) else None
    row["repair_turns"] = int(turns) if isinstance(turns, int) else None
    row["repaired"] = row["verdict"] == "repaired" or bool(turns)
    row["tags"] = [str(x) for x in r.pop("tags", None) or []]
    row["attempts"] = [{"response": _s(a.get("response")), "diagnostics": _s(a.get("diagnostics"))}
                       for a in r.pop("attempts", None) or [] if isinstance(a, dict)]
    row["edits"] = [{"at": _s(e.get("at")), "original": _s(e.get("original"))}
                    for e in r.pop("edits", None) or [] if isinstance(e, dict)]
    if r:                           # keys mens does not know: kept, as JSON
        row["extra"] = json.dumps(r, sort_keys=True, ensure_ascii=False)
    return row


def ds_record_id(rec: dict) -> str:
    from mens.data.clean import record_id
    return record_id(rec)


def write_config(splits: dict[str, list[dict]], folder: Path) -> dict[str, int]:
    """One config's splits → folder/<split>-00000-of-00001.parquet, one schema for all of them
    (the viewer and load_dataset need the splits of a config to agree). Empty splits: no file."""
    rows = [r for split in splits.values() for r in split]
    msg_keys: dict[str, list[str]] = {}
    for r in rows:
        for k in CONTENT:
            for m in r.get(k) or []:
                have = msg_keys.setdefault(k, ["role", "content"])
                have += [x for x in m if x not in have]
    # a column none of the rows fills is left out; the id and the content columns always stay
    fields = [pa.field("id", S)]
    fields += [pa.field(k, pa.list_(pa.struct([(x, S) for x in msg_keys.get(k, ["role",
                                                                              "content"])])))
               for k in CONTENT if any(k in r for r in rows)]
    fields += [pa.field(k, t) for k, t in TYPES.items() if k != "id" and
               (k in ALWAYS or any(r.get(k) not in (None, []) for r in rows))]
    schema = pa.schema(fields)
    counts = {}
    for split, part in splits.items():
        if part:
            folder.mkdir(parents=True, exist_ok=True)
            table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in fields} for r in part],
                                         schema=schema)
            pq.write_table(table, folder / SHARD.replace("train", split, 1))
        counts[split] = len(part)
    return counts


# --- the folder ----------------------------------------------------------------------------
def split_records(records: list[dict], eval_fraction: float) -> tuple[list, list, list, str]:
    """(train, eval, quarantine-tagged, how) — mens.data.sources' own rule for this file."""
    from mens.data.clean import hold_out

    tagged = [r for r in records if "quarantine" in (r.get("tags") or [])]
    rest = [r for r in records if "quarantine" not in (r.get("tags") or [])]
    golden = [r for r in rest if "eval_golden" in (r.get("tags") or [])]
    if golden:
        return ([r for r in rest if "eval_golden" not in (r.get("tags") or [])], golden, tagged,
                GOLDEN)
    keyed = [{**r, "id": r.get("id") or ds_record_id(r)} for r in rest]
    train, held, raised = hold_out(keyed, eval_fraction)
    how = (f"no record is tagged eval_golden: data.eval_fraction={eval_fraction:g} held out by "
           f"record hash (as `mens train data=file` does)")
    if raised:
        how += "; that held out none, so the record whose id hashes lowest was held out"
    return train, held, tagged, how


def scrub_stats(stats: dict) -> tuple[dict, list[str]]:
    """stats.json with user names, passwords and query strings cut out of every URL (a key can
    ride in `?api-key=`); → (stats, the keys scrubbed)."""
    scrubbed: list[str] = []

    def walk(v, where):
        if isinstance(v, dict):
            return {k: walk(x, f"{where}.{k}" if where else k) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x, where) for x in v]
        if isinstance(v, str) and "://" in v:
            u = urlsplit(v)
            if u.username or u.password or u.query:
                scrubbed.append(where)
                return urlunsplit((u.scheme, u.hostname + (f":{u.port}" if u.port else ""),
                                   u.path, "", ""))
        return v
    return walk(stats, ""), scrubbed


def secret_values(cfg=None) -> dict[str, str]:
    """name → value of every environment variable that holds a key: the teacher candidates'
    api_key_env, HF_TOKEN, and any *KEY* / *TOKEN* / *SECRET* / *PASSWORD* (8+ characters)."""
    names = {n for n in os.environ if SECRET_NAME.search(n)}
    teacher = getattr(cfg, "teacher", None) if cfg is not None else None
    if teacher is not None:
        names |= {c.api_key_env for c in [teacher, *(teacher.candidates or [])]
                  if getattr(c, "api_key_env", None)}
    return {n: os.environ[n] for n in sorted(names) if len(os.environ.get(n) or "") >= 8}


def check_secrets(files: list[Path], secrets: dict[str, str]) -> None:
    for p in files:
        blob = p.read_bytes()
        for name, value in secrets.items():
            if value.encode() in blob:
                raise ConfigError(
                    f"{p} holds the value of the environment variable {name} (a key or token): "
                    f"nothing was uploaded. Remove it from the dataset (`mens data curate edit`, "
                    f"or edit the file) and push again.", key="synth.out")


def assemble_dataset(ds_dir: Path | str, push_cfg, out: Path | str, *, cfg=None,
                     log=print) -> dict:
    """Write exactly what would be uploaded into `out` (built beside it, then renamed); the
    manifest goes to DIR/push.json. → the manifest."""
    ds_dir, out = Path(ds_dir), Path(out)
    inputs = [p for p in (ds_dir / n for n in (ds.RECORDS, ds.PAIRS, ds.QUARANTINE, ds.TREE,
                                                  ds.STATS)) if p.is_file()]
    secrets = secret_values(cfg)
    check_secrets(inputs, secrets)
    records = ds.read_jsonl(ds_dir / ds.RECORDS)
    pairs, quarantine = ds.read_jsonl(ds_dir / ds.PAIRS), ds.read_jsonl(ds_dir / ds.QUARANTINE)
    fraction = float(getattr(getattr(cfg, "data", None), "eval_fraction", 0.05))
    train, held, tagged, how = split_records(records, fraction)
    if not train and not held:
        raise ConfigError(f"{ds_dir / ds.RECORDS} has no record to push (every one is tagged "
                          f"quarantine, or the file is empty): run `mens data synth` or untag "
                          f"them (`mens data curate untag`).", key="synth.out")
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        notes = [] if how == GOLDEN else [f"eval split: {how}"]
        configs = _write(tmp, ds_dir, push_cfg.repo, records, train, held, pairs,
                         quarantine + tagged, how, notes)
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        check_secrets(files, secrets)   # the card quotes records and stats: look again
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for n in notes:
        log(f"mens data push: note: {n}")
    manifest = {"dataset": str(ds_dir), "repo": push_cfg.repo, "repo_type": "dataset",
                "folder": str(out), "configs": configs, "eval_from": how, "notes": notes,
                "files": [{"path": p.relative_to(tmp).as_posix(), "bytes": p.stat().st_size,
                           "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in files]}
    old = out.with_name(f".{out.name}.old{os.getpid()}")
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    ds.write_durable(ds_dir / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return manifest


def _write(tmp: Path, ds_dir: Path, repo: str, records, train, held, pairs, quarantine, how,
           notes: list[str]) -> dict:
    """The folder's files into tmp; → the configs' split sizes. Appends to notes."""
    from mens.push.dataset_card import TERMS, render_card, terms
    from mens.synth.tree import load

    configs = {"default": write_config({"train": [flatten(r) for r in train],
                                        "eval": [flatten(r) for r in held]}, tmp / "data")}
    for name, part in (("pairs", pairs), ("quarantine", quarantine)):
        if part:
            configs[name] = write_config({"train": [flatten(r) for r in part]}, tmp / name)
    notes += [f"the {split} split is empty and is left out (no file, not in the card)"
              for split, n in configs["default"].items() if not n]
    tree = load(ds_dir / ds.TREE) if (ds_dir / ds.TREE).is_file() else None
    if tree is not None:
        shutil.copyfile(ds_dir / ds.TREE, tmp / ds.TREE)
    stats = json.loads((ds_dir / ds.STATS).read_text()) if (ds_dir / ds.STATS).is_file() else {}
    if stats:
        stats, scrubbed = scrub_stats(stats)
        if scrubbed:
            notes.append(f"stats.json: credentials or query strings cut from the URLs in "
                         f"{', '.join(sorted(set(scrubbed)))}")
        (tmp / ds.STATS).write_text(json.dumps(stats, indent=2) + "\n")
    card = render_card(repo=repo, tree=tree, stats=stats, records=records, train=train,
                       held=held, pairs=pairs, quarantine=quarantine, configs=configs,
                       eval_from=how, notes=notes)
    (tmp / "README.md").write_text(card, encoding="utf-8")
    (tmp / TERMS).write_text(f"# Terms of use\n\n{terms(stats, records, pairs)}\n",
                             encoding="utf-8")
    return configs


# --- the command ---------------------------------------------------------------------------
def check_inputs(cfg) -> Path:
    """The dataset dir and push.repo, or ConfigError (one paragraph each)."""
    d = ds.dataset_dir(cfg)
    if not (d / ds.RECORDS).is_file():
        what = "does not exist" if not d.is_dir() else f"has no {ds.RECORDS}"
        raise ConfigError(f"the dataset dir {d} {what}: point `synth.out` at a dir made by "
                          f"`mens data synth` (default datasets/<spoke>, from `spoke=`).",
                          key="synth.out")
    repo = cfg.push.repo
    if not repo or not REPO_ID.match(str(repo)):
        got = "is not set" if not repo else f"is `{repo}`, not ORG/NAME"
        raise ConfigError(f"`push.repo` {got}: give the dataset repo to push to, e.g. "
                          f"`push.repo=my-org/{d.name or 'my-dataset'}` (letters, digits, - _ .).",
                          key="push.repo")
    return d


def push_dataset(cfg, log=print) -> int:
    """Check, assemble into DIR/push/, and (unless push.dry_run) upload to a dataset repo."""
    from mens.errors import EXIT_OK

    d = check_inputs(cfg)
    p = cfg.push
    if not p.dry_run:
        from mens.push.hub import require_token
        require_token(p.repo)           # before the work: no token, or offline → exit 2 now
    out = d / "push"
    manifest = assemble_dataset(d, p, out, cfg=cfg, log=log)
    c = manifest["configs"]
    counts = (f"train {c['default']['train']}, eval {c['default']['eval']}, pairs "
              f"{c.get('pairs', {}).get('train', 0)}, quarantine "
              f"{c.get('quarantine', {}).get('train', 0)}")
    if p.dry_run:
        log(f"mens data push: dry run — {len(manifest['files'])} files ({counts}) in {out}; "
            f"nothing uploaded (push.dry_run=false uploads them to {p.repo})")
        manifest["upload"] = {"dry_run": True}
        ds.write_durable(d / MANIFEST, json.dumps(manifest, indent=2) + "\n")
        return EXIT_OK
    from mens.push.hub import upload

    message = p.message or f"mens data push: {d.name} ({counts})"
    result = upload(out, p.repo, repo_type="dataset", private=p.private, branch=p.branch,
                    revision=p.revision, message=message,
                    description=f"Synthesized with mens data synth ({counts}).")
    manifest["upload"] = dict(result)      # repo, url, branch, commit, created, changed files
    ds.write_durable(d / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    changed = result.get("changed")
    what = ("no file changed: nothing uploaded" if changed is not None and not changed
            else f"{len(changed or [])} files changed, commit {result.get('commit')}")
    log(f"mens data push: {result.get('url')} ({counts}); {what}")
    return EXIT_OK
