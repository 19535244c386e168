"""`mens data inspect data=…`: what the data is before a run trains on it — detected format,
counts per split and what each filter removed, token-length percentiles and a histogram (the
run's own tokenizer and template), what a seq_len would cut, duplicates and contamination, and
one record rendered through the chat template with the supervised text marked ⟦like this⟧.
No torch: the same code path the planner uses (mens.data.sources, mens.data.lengths).
"""
from __future__ import annotations

from mens.data import lengths as L
from mens.data.formats import tool_calls

BAR = 40


def _spoke_dataset(cfg):
    from mens.config.objectives import card
    from mens.data.corpus import load_eval, load_spoke
    from mens.data.select import spoke_records
    from mens.data.sources import Dataset

    train, stats = load_spoke(cfg.spoke, "train", seed=cfg.train.seed)
    train, _ = spoke_records(train, card(cfg.lane))
    held, _ = spoke_records(load_eval(cfg.spoke), card(cfg.lane))
    seen, uniq = set(), []
    for r in train:   # the mix upsamples: count each record once
        if r["id"] not in seen:
            seen.add(r["id"])
            uniq.append(r)
    stats = {"read": stats["read"], "below_min_rating": stats["below_min_rating"],
             "upsampled": stats.get("upsampled", 0), "eval_from": "the spoke's eval.jsonl",
             "train_records": len(uniq), "eval_records": len(held)}
    record = card(cfg.lane).record
    kind = {"chat": "sft", "pairs": "preference"}.get(record, record)
    return Dataset(uniq, held, kind, "mens (spoke corpus)", stats)


def tool_counts(ds, enc, seq: int) -> dict:
    """Tool calls over train + eval as the run will encode them: read, rendered (parsed back out
    of the rendered text), supervised within seq_len; {} when the data calls no tool. Encoding
    raises (exit 2) where a template would lose a call."""
    from mens.data.formats import turns

    stats: dict = {}
    for r in ds.train + ds.eval:
        if tool_calls(r):
            enc.encode(turns(r), seq, stats, r.get("tools"))
    return {k: v for k, v in stats.items() if k.startswith("tool_calls")}


def histogram(tokens: list[int], bins: int = 10) -> list[str]:
    if not tokens:
        return []
    lo, hi = min(tokens), max(tokens)
    width = max(1, -(-(hi - lo + 1) // bins))
    counts = [0] * bins
    for t in tokens:
        counts[min(bins - 1, (t - lo) // width)] += 1
    top = max(counts)
    return [f"  {lo + i * width:>6}–{lo + (i + 1) * width - 1:<6} {c:>6}  "
            f"{'█' * round(BAR * c / top) if top else ''}" for i, c in enumerate(counts)]


def inspect(cfg, seq_len: int | None = None) -> dict:
    """The report as a dict (`text` holds it printed)."""
    from mens.config.objectives import card
    from mens.data.select import data_label, dataset, user_data

    user = user_data(cfg)
    ds = dataset(cfg.data, card(cfg.lane), list(cfg.curriculum.phases)) if user \
        else _spoke_dataset(cfg)
    name = data_label(cfg.data) if user else f"spoke {cfg.spoke.name}"
    enc = L.encoder(cfg)
    lens = L.lengths(ds, enc) if enc is not None else {"train": L.estimate(ds), "eval": []}
    seq = seq_len or (cfg.train.seq_len if cfg.train.seq_len != "auto" else None)
    if seq is None:
        p99 = L.percentile([t for t, _ in lens["train"]], 99)
        seq = max(L.ROUND, -(-p99 // L.ROUND) * L.ROUND)
    s = ds.stats
    out = {"data": name, "format": ds.format, "kind": ds.kind, "stats": s, "seq_len": seq,
           "train": L.summary(lens["train"], seq), "eval": L.summary(lens["eval"], seq),
           "lock": ds.lock}
    lines = [f"mens data inspect · {name} · format {ds.format} ({ds.kind})",
             f"records: {s.get('read', '?')} read → train {len(ds.train)} · eval {len(ds.eval)} "
             f"(eval from {s.get('eval_from', '?')})"]
    removed = {k: s[k] for k in ("bad_skipped", "duplicates_removed", "below_min_rating",
                                 "tag_filtered", "eval_duplicates_removed_from_train",
                                 "contaminated_eval_removed", "upsampled") if s.get(k)}
    lines.append("removed/counted: " + (", ".join(f"{k} {v}" for k, v in removed.items())
                                        or "nothing (no duplicates, no contamination)"))
    for b in s.get("bad_examples") or []:
        lines.append(f"  skipped (data.on_bad=skip): {b}")
    if s.get("contaminated_examples"):
        lines.append(f"  contaminated eval records ({s['decontam_n']}-grams): "
                     + ", ".join(s["contaminated_examples"]))
    how = "tokens (the model's tokenizer and chat template)" if enc is not None else \
        "tokens ESTIMATED from characters (the model's tokenizer is not here)"
    for split in ("train", "eval"):
        x = out[split]
        if x["records"]:
            lines.append(f"{split} lengths in {how}: p50 {x['p50']} · p90 {x['p90']} · p99 "
                         f"{x['p99']} · max {x['max']}")
    lines += histogram([t for t, _ in lens["train"]])
    t = out["train"]
    lines.append(f"at seq_len {seq}: {t['truncated']} of {t['records']} training records are cut, "
                 f"{t['unsupervised']} keep no answer token (skipped)")
    if enc is not None:
        calls = tool_counts(ds, enc, seq)
        if calls:
            out["tool_calls"] = calls
            lines.append(f"tool calls ({enc.tool_syntax or 'template'} syntax): "
                         f"{calls['tool_calls_read']} read → {calls['tool_calls_rendered']} "
                         f"rendered → {calls['tool_calls_supervised']} supervised at seq_len "
                         f"{seq} ({calls['tool_calls_truncated']} cut by the window)")
    if enc is not None and ds.train:
        first = next((r for r in ds.train if tool_calls(r)), ds.train[0])
        lines += ["", "one record through the chat template (⟦supervised⟧):",
                  enc.marked(first)]
    out["text"] = "\n".join(lines)
    return out
