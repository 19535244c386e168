#!/usr/bin/env python
"""Generate the spokes' corpora, deterministically (byte-identical on every run):

    python tools/make_corpus.py                        # every spoke into mens/assets/corpora/
    python tools/make_corpus.py --spoke vox_lang --out /tmp/corpus   # one spoke elsewhere

For each spoke (conf/spoke/*.yaml) this writes mens/assets/corpora/<spoke>/: one JSONL per source (the
training split, ~300 records shared by the mix weights), eval.jsonl (~40 held-out records),
eval_pairs.jsonl for a spoke with preference pairs, and manifest.json (counts, admission
results, rating filter, character-length percentiles).

Content comes from the templates in tools/corpus_templates/ (one module per spoke), each
source and split drawn from random.Random("<seed>/<spoke>/<source>/<split>"), so editing one
spoke's templates leaves the other spokes' training files unchanged. `--spoke` still generates
every spoke's training split (eval is decontaminated against all of them) and writes only the
named ones. Templates check their own claims and fail loudly (stated outputs are computed by
running the code; Vox diagnostics come from mens.synth.vox; with cargo/jq present, quoted rustc error
codes and jq outputs are confirmed). Every record then goes through its spoke's admission check
(mens/admission.py): a failure is dropped and counted, a check whose tool is missing here (no
cargo) leaves `verified: null`, counted as unverified.
Held-out: eval records use pool items no training record uses (common.Ctx.pick) — and, where a
module sets HELD_OUT, whole template families no training record comes from — and any eval
candidate that shares a 12-word sequence with ANY training record of ANY spoke, or whose prompt
equals a training prompt, is rejected and counted (`decontamination` in the manifest).
Ratings: ~7 % of training records are built "terse" (the artefact without explanation) and
rated below the spoke's min_rating, so the loader's filter visibly drops them.
Tool use (mcp_tool_chain, agent_harness) is structure, as mens.data.tools keeps a user's: the
record's `tools`, each assistant turn's `tool_calls`, `tool` turns naming the call they answer —
so each model family's template writes it in its own syntax. The held-out tests read a call as its
Hermes text (the words a model writes), and the character lengths render it through the tiny
rung's template (mens.data.corpus.render).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sys
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from corpus_templates import agent, arith, mcp, mesh, rust, shell, skills, speech, vox  # noqa: E402
from corpus_templates.common import Ctx  # noqa: E402
from mens.synth.admission import check_all  # noqa: E402
from mens.data.corpus import render  # noqa: E402
from mens.data.tools import call_text  # noqa: E402

SEED = "mens-corpus-v1"
TRAIN, EVAL, EVAL_PAIRS = 300, 40, 20
TERSE_RATE = 0.07
NGRAM = 12
MODULES = {"vox_lang": vox, "rust_workspace": rust, "structured_shell": shell,
           "mcp_tool_chain": mcp, "agent_harness": agent, "speech_to_code": speech,
           "populi_mesh": mesh, "skill_creation": skills, "arith": arith}
ORIGIN = "tools/make_corpus.py"


def spokes() -> dict[str, dict]:
    return {p.stem: yaml.safe_load(p.read_text())
            for p in sorted((ROOT / "conf" / "spoke").glob("*.yaml"))}


SPECIAL = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


def words(text: str) -> list[str]:
    """Lower-cased whitespace words; chat special tokens count as spaces, so a message's last
    word is never glued to `<|im_end|>` (which would hide an overlap at a message boundary)."""
    for tok in SPECIAL:
        text = text.replace(tok, " ")
    return text.lower().split()


def grams(text: str) -> set[bytes]:
    """12-gram fingerprints; blake2b, not hash(), so no run depends on PYTHONHASHSEED."""
    w = words(text)
    return {hashlib.blake2b(" ".join(w[i:i + NGRAM]).encode(), digest_size=8).digest()
            for i in range(len(w) - NGRAM + 1)}


def text(m: dict) -> str:
    """A message's text, its tool calls included (as Hermes <tool_call> blocks after the content:
    the words a model writes for them, whatever a family's template wraps them in)."""
    calls = [f"<tool_call>\n{call_text(c)}\n</tool_call>" for c in m.get("tool_calls") or []]
    return "\n".join(([m["content"]] if m["content"] or not calls else []) + calls)


def full_text(rec: dict) -> str:
    """Every message of a record, all roles (a pair: prompt, chosen and rejected), and the
    schemas of the tools it declares."""
    msgs = rec["prompt"] + rec["chosen"] + rec["rejected"] if "prompt" in rec else rec["messages"]
    tools = [json.dumps(t, ensure_ascii=False) for t in rec.get("tools") or []]
    return "\n".join([text(m) for m in msgs] + tools)


def answer_text(rec: dict) -> str:
    msgs = rec["chosen"] + rec["rejected"] if "prompt" in rec else rec["messages"]
    return "\n".join(text(m) for m in msgs if m["role"] == "assistant")


def prompt_key(rec: dict) -> str:
    msgs = rec["prompt"] if "prompt" in rec else rec["messages"]
    return " ".join(" ".join(m["content"] for m in msgs if m["role"] == "user").split())


def quotas(total: int, sources: list[dict]) -> dict[str, int]:
    w = sum(s["weight"] for s in sources)
    return {s["name"]: round(total * s["weight"] / w) for s in sources}


def generate(spoke: str, cfg: dict, source: str, split: str, n: int, seen: set,
             index: set | None, counts: Counter) -> list[dict]:
    """n records of one source and split. `seen`: prompts so far (all spokes); `index`: the
    12-grams of every training record (eval candidates that hit it are rejected)."""
    rng = random.Random(f"{SEED}/{spoke}/{source}/{split}")
    templates = MODULES[spoke].SOURCES[source]
    held = getattr(MODULES[spoke], "HELD_OUT", {}).get(source)
    if held:                 # whole template families reserved for eval (see the module's doc)
        templates = [t for t in templates if (t[1].__name__ in held) == (split == "eval")]
    out, tries = [], 0
    while len(out) < n:
        tries += 1
        if tries > 40 * n:
            raise RuntimeError(f"{spoke}/{source}/{split}: only {len(out)} of {n} records after "
                               f"{tries} tries ({dict(counts)}): the templates are not varied "
                               f"enough for the held-out rule")
        terse = split == "train" and rng.random() < TERSE_RATE
        fn = rng.choices([t for _, t in templates], [w for w, _ in templates])[0]
        rec = fn(Ctx(rng, split, terse))
        key = prompt_key(rec)
        if key in seen:
            counts["duplicate_prompt"] += 1
            continue
        if index is not None and grams(answer_text(rec)) & index:
            counts["overlap_12gram"] += 1
            counts[f"overlap_12gram:{rec['strategy']}"] += 1
            continue
        seen.add(key)
        lo = cfg["min_rating"]
        rating = rng.uniform(max(1.0, lo - 1.6), lo - 0.15) if terse else rng.uniform(lo, 5.0)
        rec.update(rating=round(max(1.0, rating), 1), terse=terse)
        out.append(rec)
    return out


def finish(spoke: str, source: str, rec: dict, split: list[str], number: int) -> dict:
    body = {k: rec[k] for k in ("prompt", "chosen", "rejected")} if "prompt" in rec else \
        {"messages": rec["messages"], **({"tools": rec["tools"]} if "tools" in rec else {})}
    strategy = rec["strategy"] + (":terse" if rec["terse"] else "")
    return {"id": f"{spoke}-{source}-{number:04d}", "spoke": spoke, "source": source, **body,
            "difficulty": rec["difficulty"], "phase": rec["phase"], "rating": rec["rating"],
            "split": split, "provenance": {"origin": ORIGIN, "teacher_model": None,
                                           "prompt_strategy": strategy},
            "verified": rec["verified"]}


def pct(values: list[int]) -> dict:
    v = sorted(values)
    at = {p: v[max(0, math.ceil(p / 100 * len(v)) - 1)] for p in (50, 95, 99)} if v else {}
    return {"p50": at.get(50, 0), "p95": at.get(95, 0), "p99": at.get(99, 0),
            "max": v[-1] if v else 0, "n": len(v)}


def lengths(recs: list[dict]) -> tuple[list[int], list[int]]:
    texts = [max((render(r, a) for a in ("chosen", "rejected")), key=len) if "prompt" in r
             else render(r) for r in recs]
    return [len(t) for t in texts], [len(t.split()) for t in texts]


def build(names: list[str], out_dir: Path) -> dict[str, dict]:
    cfgs, seen, index = spokes(), set(), set()
    counts = {s: Counter() for s in cfgs}
    train = {}
    for spoke, cfg in cfgs.items():             # every spoke's train first: eval is held out
        train[spoke] = {}                       # from all of them, so all are always generated
        for source, q in quotas(TRAIN, cfg["sources"]).items():
            recs = generate(spoke, cfg, source, "train", q, seen, None, counts[spoke])
            train[spoke][source] = recs
            for r in recs:
                index |= grams(full_text(r))
    manifests = {}
    for spoke in names:
        cfg = cfgs[spoke]
        sft = [s for s in cfg["sources"] if s.get("kind", "sft") == "sft"]
        prefs = [s for s in cfg["sources"] if s.get("kind") == "preference"]
        evals = {s: generate(spoke, cfg, s, "eval", q, seen, index, counts[spoke])
                 for s, q in quotas(EVAL, sft).items()}
        pair_evals = {s["name"]: generate(spoke, cfg, s["name"], "eval", EVAL_PAIRS, seen, index,
                                          counts[spoke]) for s in prefs}
        manifests[spoke] = write_spoke(spoke, cfg, train[spoke], evals, pair_evals,
                                       counts[spoke], out_dir / spoke)
    return manifests


def write_spoke(spoke, cfg, train, evals, pair_evals, counts, folder: Path) -> dict:
    check = cfg["admission"]["check"]
    groups = [("train", s, r) for s, rs in train.items() for r in rs] + \
        [("eval", s, r) for s, rs in evals.items() for r in rs] + \
        [("eval_pairs", s, r) for s, rs in pair_evals.items() for r in rs]
    verify = getattr(MODULES[spoke], "verify", None)     # template self-checks (loud)
    if verify:
        verify([r for _, _, r in groups])
    results = check_all(check, [r for _, _, r in groups])
    adm = {"check": check, "tool": cfg["admission"].get("tool"), "passed": 0,
           "failed_dropped": 0, "unverified": 0, "by_source": {}}
    files: dict[str, list[dict]] = {}
    numbers = Counter()
    paths = {s["name"]: s["path"] for s in cfg["sources"]}
    for (split, source, rec), ok in zip(groups, results):
        key = {True: "passed", False: "failed_dropped", None: "unverified"}[ok]
        adm[key] += 1
        adm["by_source"].setdefault(f"{split}/{source}", Counter())[key] += 1
        if ok is False:
            continue
        rec["verified"] = ok
        tag = ["train"] if split == "train" else \
            ["eval", "golden"] if ok and rec["rating"] >= 4.5 else ["eval"]
        name = paths[source] if split == "train" else f"{split}.jsonl"
        files.setdefault(name, []).append(finish(spoke, source, rec, tag, numbers[source]))
        numbers[source] += 1
    folder.mkdir(parents=True, exist_ok=True)
    for name, recs in files.items():
        (folder / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs),
                                   encoding="utf-8")
    manifest = summarize(spoke, cfg, files, adm, counts)
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    return manifest


def summarize(spoke, cfg, files, adm, counts) -> dict:
    by = {"train": [r for n, rs in files.items() if not n.startswith("eval") for r in rs],
          "eval": files.get("eval.jsonl", []), "eval_pairs": files.get("eval_pairs.jsonl", [])}
    by = {k: v for k, v in by.items() if v}
    chars = {k: pct(lengths(v)[0]) for k, v in by.items()}
    return {
        "spoke": spoke, "generator": ORIGIN, "seed": SEED, "command": "python tools/make_corpus.py",
        "files": {n: len(rs) for n, rs in sorted(files.items())},
        "counts": {k: {"total": len(v), "by_source": dict(sorted(Counter(r["source"] for r in v).items())),
                       "by_phase": dict(sorted(Counter(r["phase"] for r in v).items())),
                       "by_difficulty": {str(d): c for d, c in sorted(Counter(
                           r["difficulty"] for r in v).items())},
                       "golden": sum("golden" in r["split"] for r in v)} for k, v in by.items()},
        "admission": {**adm, "by_source": {k: dict(v) for k, v in sorted(adm["by_source"].items())}},
        "rating": {"min_rating": cfg["min_rating"], "below_min_rating": {
            k: sum(r["rating"] < cfg["min_rating"] for r in v) for k, v in by.items()}},
        "decontamination": {"ngram": NGRAM, "rejected_overlap_12gram": counts["overlap_12gram"],
                            "rejected_duplicate_prompt": counts["duplicate_prompt"],
                            "rejected_overlap_by_strategy": {
                                k.split(":", 1)[1]: v for k, v in sorted(counts.items())
                                if k.startswith("overlap_12gram:")}},
        "chars": chars, "words": {k: pct(lengths(v)[1]) for k, v in by.items()},
        "p99_chars": chars["train"]["p99"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "mens" / "assets" / "corpora",
                    help="folder to write <spoke>/ into (default mens/assets/corpora)")
    ap.add_argument("--spoke", action="append", choices=sorted(MODULES),
                    help="only this spoke (repeatable); default all")
    args = ap.parse_args(argv)
    names = args.spoke or sorted(MODULES)
    for spoke, m in build(names, args.out).items():
        a = m["admission"]
        print(f"{spoke:18} train {m['counts']['train']['total']:4} eval "
              f"{m['counts']['eval']['total']:3}  admission {a['check']}: {a['passed']} passed, "
              f"{a['failed_dropped']} dropped, {a['unverified']} unverified  "
              f"decontam {m['decontamination']['rejected_overlap_12gram']}  "
              f"p99 {m['p99_chars']} chars")
    return 0


if __name__ == "__main__":
    sys.exit(main())
