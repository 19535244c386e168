"""Loading the spokes' corpora (mens/assets/corpora/<spoke>/, written by tools/make_corpus.py).

`load_spoke(cfg)` reads every source of a spoke, validates each line, applies the spoke's
filters and mix weights, and returns (records, stats). Nothing is dropped silently: every
filter counts what it removed in `stats`, and a filter that leaves nothing raises DataError
naming itself. No torch here: planning and tests read data without it.

Mix rule (deterministic): after the filters, N = records available over all sources; source i
contributes round(w_i * N) records, w_i its weight normalised over the spoke's sources. A source
with at least that many is sampled without replacement; one with fewer contributes all of its
records plus the shortfall drawn with replacement (upsampling, counted as `upsampled`). Draws
use random.Random(f"{seed}/{spoke}/{source}"), and the union is shuffled with
random.Random(f"{seed}/{spoke}"), so a seed fixes the exact list.
"""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Iterator

from mens.data import tools as T
from mens.data.formats import kind, turns
from mens.errors import ConfigError, DataError  # noqa: F401  (DataError: raised here)
from mens.resources import CORPORA

DATA_DIR = CORPORA   # mens/assets/corpora/<spoke>/ (written by tools/make_corpus.py)
PHASES = ("warmup", "syntax", "reasoning", "tool_call", "multi_turn", "orchestration", "agentic")
ROLES = {"system", "user", "assistant", "tool"}
SPLITS = {"train", "eval", "golden"}
CHATML = "<|im_start|>{role}\n{content}<|im_end|>\n"   # as mens.data.pack renders a record
COMMON_KEYS = ("id", "spoke", "source", "difficulty", "phase", "rating", "split", "provenance",
               "verified")
REGENERATE = "Regenerate generated files with `python tools/make_corpus.py`."


def _messages_problem(msgs, key: str, last_role: str | None = None) -> str | None:
    if not isinstance(msgs, list) or not msgs:
        return f"`{key}` must be a non-empty list of {{role, content}} messages"
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            return f"`{key}[{i}]` must be an object with a string `content`"
        if m.get("role") not in ROLES:
            return f"`{key}[{i}].role` is {m.get('role')!r}; roles are {', '.join(sorted(ROLES))}"
    if last_role and msgs[-1]["role"] != last_role:
        return f"`{key}` must end with a {last_role} message, not {msgs[-1]['role']}"
    return None


def _tools_problem(rec: dict, lists: tuple[str, ...]) -> tuple[str, str] | None:
    """Tool use kept as structure, in the canonical form mens.data.tools gives user data (the
    trainer takes corpus records as they are): `tools` in OpenAI's form, every call naming one of
    them with an arguments object, every tool turn answering a call of the turn before it."""
    tools = rec.get("tools")
    try:
        names = T.tool_names(T.normalize_tools(tools)) if tools is not None else None
        if tools is not None and T.normalize_tools(tools) != tools:
            return "tools", ("`tools` must be OpenAI's form, [{\"type\": \"function\", "
                             "\"function\": {\"name\", \"description\", \"parameters\"}}]")
        for k in lists:
            msgs = [dict(m) for m in rec[k]]
            for i, m in enumerate(msgs):
                calls = T.message_calls(m, f"{k}[{i}]", m["role"], False, names)
                if calls != (m.get("tool_calls") or []):
                    return k, (f"`{k}[{i}].tool_calls` must be OpenAI's form, [{{\"id\", "
                               f"\"type\": \"function\", \"function\": {{\"name\", "
                               f"\"arguments\": {{…}}}}}}]")
            T.link_results(msgs, k)
    except T.ToolError as e:
        return e.key, e.why
    return None


def validate(rec) -> tuple[str, str] | None:
    """(key, what is wrong) for the first schema violation, or None for a valid record."""
    if not isinstance(rec, dict):
        return "record", "each line must be one JSON object"
    pair = kind(rec) == "pair"
    for k in COMMON_KEYS + (("prompt", "chosen", "rejected") if pair else ("messages",)):
        if k not in rec:
            return k, f"missing key `{k}`"
    for k in ("id", "spoke", "source"):
        if not isinstance(rec[k], str) or not rec[k]:
            return k, f"`{k}` must be a non-empty string"
    d = rec["difficulty"]
    if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= 10:
        return "difficulty", f"`difficulty` is {d!r}; it must be an integer from 1 to 10"
    if rec["phase"] not in PHASES:
        return "phase", f"`phase` is {rec['phase']!r}; phases are {', '.join(PHASES)}"
    r = rec["rating"]
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not 1 <= r <= 5:
        return "rating", f"`rating` is {r!r}; it must be a number from 1 to 5"
    s = rec["split"]
    if not isinstance(s, list) or not s or not set(s) <= SPLITS or "golden" in s and "eval" not in s:
        return "split", f"`split` is {s!r}; use [\"train\"], [\"eval\"] or [\"eval\", \"golden\"]"
    if not isinstance(rec["provenance"], dict) or "origin" not in rec["provenance"]:
        return "provenance", "`provenance` must be an object with at least `origin`"
    if rec["verified"] not in (True, False, None):
        return "verified", f"`verified` is {rec['verified']!r}; use true, false or null"
    if pair:
        for k, last in (("prompt", "user"), ("chosen", "assistant"), ("rejected", "assistant")):
            if problem := _messages_problem(rec[k], k, last):
                return k, problem
    else:
        if problem := _messages_problem(rec["messages"], "messages"):
            return "messages", problem
        if not any(m["role"] == "assistant" for m in rec["messages"]):
            return "messages", "`messages` has no assistant turn: nothing to learn from"
    return _tools_problem(rec, ("prompt", "chosen", "rejected") if pair else ("messages",))


def load_jsonl(path: Path | str) -> list[dict]:
    """Every record of a JSONL file, validated; the first bad line raises DataError."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"no such corpus file. {REGENERATE}", path)
    out = []
    with path.open(encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError as e:
                raise DataError(f"line is not valid JSON ({e.msg}, column {e.colno}). Fix or "
                                f"delete the line. {REGENERATE}", path, n) from None
            if problem := validate(rec):
                key, why = problem
                raise DataError(f"schema violation in key `{key}`: {why}. Fix the record or "
                                f"delete the line. {REGENERATE}", path, n, key=key)
            out.append(rec)
    return out


def _get(cfg, key: str, default=None):
    """Read a spoke config given as a DictConfig, a dataclass or a plain dict."""
    return cfg.get(key, default) if isinstance(cfg, dict) else getattr(cfg, key, default)


def is_pair(rec: dict) -> bool:
    """kind(rec) == "pair" (kept for the callers that filter corpus records by it)."""
    return kind(rec) == "pair"


def _filter(recs: list[dict], min_rating: float, counts: dict) -> list[dict]:
    """min_rating drops low-rated records; verified=false (failed admission) is dropped too;
    verified=null (the check could not run where the corpus was built) is kept and counted."""
    keep = []
    for r in recs:
        if r["rating"] < min_rating:
            counts["below_min_rating"] += 1
        elif r["verified"] is False:
            counts["failed_admission"] += 1
        else:
            counts["unverified"] += r["verified"] is None
            keep.append(r)
    return keep


def _read_source(folder: Path, src, split: str) -> tuple[list[dict], str, Path]:
    kind, path = _get(src, "kind", "sft"), folder / _get(src, "path")
    recs = load_jsonl(path)
    for n, r in enumerate(recs, 1):
        if is_pair(r) != (kind == "preference"):
            want = "preference pairs (prompt/chosen/rejected)" if kind == "preference" else \
                "SFT records (messages)"
            raise DataError(f"source `{_get(src, 'name')}` is declared kind={kind} and must hold "
                            f"{want}; record {r['id']} does not. Fix the spoke's `sources` or the "
                            f"file.", path, n, key="kind")
        if split not in r["split"]:
            raise DataError(f"record {r['id']} has split {r['split']} in a {split} file: a "
                            f"misplaced record would leak between train and eval. {REGENERATE}",
                            path, n, key="split")
    return recs, kind, path


def load_spoke(spoke_cfg, split: str = "train", data_dir: Path | str = DATA_DIR,
               seed: int = 0) -> tuple[list[dict], dict]:
    """(records, stats) of a spoke's `train` (mixed per the module's rule) or `eval` split."""
    name, min_rating = _get(spoke_cfg, "name"), float(_get(spoke_cfg, "min_rating", 3.0))
    folder = Path(data_dir) / name
    if not folder.is_dir():
        raise DataError(f"spoke `{name}` has no corpus folder. {REGENERATE}", folder, key="spoke")
    sources = list(_get(spoke_cfg, "sources", []) or [])
    if split == "eval":
        prefer = _get(spoke_cfg, "preference_pairs", False) or any(
            _get(s, "kind", "sft") == "preference" for s in sources)
        sources = [{"name": "eval", "path": "eval.jsonl", "weight": 1.0, "kind": "sft"}] + (
            [{"name": "eval_pairs", "path": "eval_pairs.jsonl", "weight": 0.0,
              "kind": "preference"}] if prefer else [])
    elif split != "train":
        raise ValueError(f"split must be 'train' or 'eval', not {split!r}")
    if not sources:
        raise DataError(f"spoke `{name}` declares no sources (conf/spoke/{name}.yaml).",
                        key="spoke.sources")
    stats = {"spoke": name, "split": split, "seed": seed, "min_rating": min_rating,
             "by_source": {}}
    pools: dict[str, list[dict]] = {}
    for src in sources:
        recs, kind, path = _read_source(folder, src, split)
        counts = {"kind": kind, "read": len(recs), "below_min_rating": 0, "failed_admission": 0,
                  "unverified": 0}
        pools[_get(src, "name")] = _filter(recs, min_rating, counts)
        counts["available"] = len(pools[_get(src, "name")])
        stats["by_source"][_get(src, "name")] = counts
    for k in ("read", "below_min_rating", "failed_admission", "unverified", "available"):
        stats[k] = sum(c[k] for c in stats["by_source"].values())
    if stats["read"] == 0:
        raise DataError(f"spoke `{name}` has no {split} records: its files are empty. "
                        f"{REGENERATE}", folder, key="spoke.sources")
    if stats["available"] == 0:
        culprit = "min_rating" if stats["below_min_rating"] else "admission (verified=false)"
        raise DataError(
            f"the {culprit} filter removed every {split} record of spoke `{name}` "
            f"({stats['read']} read; {stats['below_min_rating']} below min_rating={min_rating}, "
            f"{stats['failed_admission']} failed admission). Lower `spoke.min_rating` or fix the "
            f"data.", folder, key="spoke.min_rating" if culprit == "min_rating" else "verified")
    if split == "eval":                 # eval is never resampled: every record, file order
        records = [r for pool in pools.values() for r in pool]
        stats["records"] = len(records)
        return records, stats
    total_w = sum(float(_get(s, "weight")) for s in sources)
    if total_w <= 0:
        raise DataError(f"spoke `{name}`'s source weights sum to {total_w}; give each a positive "
                        f"weight.", key="spoke.sources")
    n, records = stats["available"], []
    for src in sources:
        sname, w = _get(src, "name"), float(_get(src, "weight")) / total_w
        pool, target = pools[sname], round(w * n)
        if target and not pool:
            raise DataError(f"source `{sname}` of spoke `{name}` has weight {w:.2f} but the "
                            f"min_rating/admission filters left it no records "
                            f"({stats['by_source'][sname]}). Lower `spoke.min_rating` or set its "
                            f"weight to 0.", key="spoke.sources")
        rng = random.Random(f"{seed}/{name}/{sname}")
        if target <= len(pool):
            chosen = rng.sample(pool, target)
        else:
            chosen = pool + rng.choices(pool, k=target - len(pool))
        stats["by_source"][sname].update(weight=round(w, 4), target=target, selected=len(chosen),
                                         upsampled=max(0, target - len(pool)),
                                         unselected=max(0, len(pool) - target))
        records += chosen
    random.Random(f"{seed}/{name}").shuffle(records)
    stats["records"] = len(records)
    stats["upsampled"] = sum(c["upsampled"] for c in stats["by_source"].values())
    stats["mix_rule"] = "round(weight*N) per source; sample w/o replacement, upsample with"
    return records, stats


def load_eval(spoke_cfg, data_dir: Path | str = DATA_DIR) -> list[dict]:
    """eval.jsonl (and eval_pairs.jsonl for a spoke with preference pairs), filtered as train."""
    return load_spoke(spoke_cfg, split="eval", data_dir=data_dir)[0]


def render(rec: dict, answer: str = "chosen") -> str:
    """ChatML text of a record as the trainer sees it on the tiny rung; a pair renders prompt +
    `answer`. A record that uses tools goes through the tiny rung's template itself
    (mens.data.chat_template.CHATML: its schemas in the system turn, its calls as <tool_call>
    blocks); without tools that template writes exactly CHATML per message."""
    msgs = turns(rec, answer)
    if rec.get("tools") or any(m.get("tool_calls") for m in msgs):
        from mens.data.chat_template import CHATML as TEMPLATE, render as render_template

        return render_template(TEMPLATE, msgs, {}, tools=rec.get("tools"))
    return "".join(CHATML.format(role=m["role"], content=m["content"]) for m in msgs)


def corpus_texts(exclude_eval: bool = True, data_dir: Path | str = DATA_DIR) -> Iterator[str]:
    """Every corpus record of every spoke, rendered (train only unless exclude_eval=False) —
    e.g. for pretraining a tiny base on the same distribution without touching eval."""
    for folder in sorted(p for p in Path(data_dir).iterdir() if p.is_dir()):
        for path in sorted(folder.glob("*.jsonl")):
            for rec in load_jsonl(path):
                if exclude_eval and "eval" in rec["split"]:
                    continue
                yield render(rec)


def corpus_lock(spoke: str, corpora: Path | str = CORPORA) -> list[dict]:
    """The spoke's corpus by content: [{corpus (relative to the corpora dir), sha256, bytes}]
    (spec.yaml's data_lock for spoke data; gate receipts; the ladder's STALE)."""
    folder = Path(corpora) / spoke
    files = sorted(p for p in folder.glob("*.jsonl") if p.is_file()) if folder.is_dir() else []
    return [{"corpus": f"{spoke}/{p.name}", "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
             "bytes": p.stat().st_size} for p in files]
