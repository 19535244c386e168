"""Records → tokenized Examples (the run's own tokenizer, ChatML, loss on assistant tokens).

A record whose answer lies wholly beyond the window has nothing to learn from: it is skipped
and counted (`unsupervised_records_skipped`), never dropped silently.
"""
from __future__ import annotations

from mens.data.pack import IGNORE, Example, tokenize_chat


def examples_for(records, tokenizer, spec, phases, pairs: bool, max_len: int | None = None):
    """{record id: Example} (SFT) or {id: (chosen, rejected, pair index)} (pairs), and stats."""
    out, stats = {}, {"unsupervised_records_skipped": 0}
    max_len = max_len or spec.train.seq_len

    def supervised(*labels) -> bool:   # the window cut off every answer token: nothing to learn
        if all(any(x != IGNORE for x in lab[1:]) for lab in labels):
            return True
        stats["unsupervised_records_skipped"] += 1
        return False

    for r in records:
        if r["id"] in out:   # an upsampled repeat: one example (and one pair index) per record
            continue
        phase = phases.index(r["phase"])
        if pairs:
            c_ids, c_lab = tokenize_chat(tokenizer, r["prompt"] + r["chosen"], max_len, stats)
            r_ids, r_lab = tokenize_chat(tokenizer, r["prompt"] + r["rejected"], max_len, stats)
            if supervised(c_lab, r_lab):
                out[r["id"]] = (Example(c_ids, c_lab, phase, r["id"]),
                                Example(r_ids, r_lab, phase, r["id"]), len(out))   # + pair index
        else:
            ids, labels = tokenize_chat(tokenizer, r["messages"], max_len, stats)
            if supervised(labels):
                out[r["id"]] = Example(ids, labels, phase, r["id"])
    return out, stats
