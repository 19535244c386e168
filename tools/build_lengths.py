"""Write each spoke's length manifest, mens/assets/corpora/<spoke>/lengths.json, with the tiny tokenizer:

    python tools/build_lengths.py

Every TRAINING record of a spoke (the files its conf/spoke/<name>.yaml `sources` declare, before
rating filters and mix weights) is rendered with the chat template (ChatML, as mens.data.pack trains
it; a record's `tools` passed as `tools=`, so its schemas and calls are counted as the template
writes them) and tokenised with mens/assets/tiny's tokenizer. A preference pair counts as its longer
rendering (prompt + chosen or prompt + rejected): both must fit in seq_len. The planner reads
p99_tokens for the tiny rung and p99_chars / est_chars_per_token for rungs whose tokenizer is not
present (mens.plan.spec.resolve_seq_len). Run after `python tools/tiny_base.py`.
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "mens" / "assets" / "corpora"
TINY = ROOT / "mens" / "assets" / "tiny"
EST_CHARS_PER_TOKEN = 3.5
NOTE = ("p99_chars/est_chars_per_token estimates lengths for rungs whose tokenizer is not "
        "present; 3.5 is an assumption, not a measurement of Qwen3's tokenizer")


def percentile(xs: list[int], q: float) -> int:
    """Nearest-rank percentile of a non-empty list (an actual value, never interpolated)."""
    s = sorted(xs)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def renderings(rec: dict) -> list[list[dict]]:
    if "prompt" in rec:
        return [rec["prompt"] + rec["chosen"], rec["prompt"] + rec["rejected"]]
    return [rec["messages"]]


def spoke_lengths(tok, spoke: dict) -> dict:
    from mens.data.corpus import load_jsonl

    tokens, chars = [], []
    for src in spoke["sources"]:
        for rec in load_jsonl(DATA / spoke["name"] / src["path"]):
            texts = [tok.apply_chat_template(m, tools=rec.get("tools"), tokenize=False)
                     for m in renderings(rec)]
            tokens.append(max(len(tok.encode(t, add_special_tokens=False)) for t in texts))
            chars.append(max(len(t) for t in texts))
    if not tokens:
        raise SystemExit(f"spoke {spoke['name']} has no training records")
    return {"tokenizer": "mens/tiny", "records": len(tokens),
            "p50_tokens": percentile(tokens, 50), "p95_tokens": percentile(tokens, 95),
            "p99_tokens": percentile(tokens, 99), "max_tokens": max(tokens),
            "p99_chars": percentile(chars, 99), "est_chars_per_token": EST_CHARS_PER_TOKEN,
            "note": NOTE}


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main() -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TINY), local_files_only=True)
    for conf in sorted((ROOT / "conf" / "spoke").glob("*.yaml")):
        spoke = yaml.safe_load(conf.read_text())
        if not (DATA / spoke["name"]).is_dir():
            print(f"{spoke['name']}: no corpus folder, skipped")
            continue
        out = spoke_lengths(tok, spoke)
        write_atomic(DATA / spoke["name"] / "lengths.json", json.dumps(out, indent=2) + "\n")
        print(f"{spoke['name']}: {out['records']} records, p50/p95/p99/max tokens "
              f"{out['p50_tokens']}/{out['p95_tokens']}/{out['p99_tokens']}/{out['max_tokens']}")


if __name__ == "__main__":
    main()
