"""Records → tokenized Examples (the run's own tokenizer and chat template; loss on the
assistant turns, or on every token of a plain-text record).

A record whose answer lies wholly beyond the window has nothing to learn from: it is skipped
and counted (`unsupervised_records_skipped`), never dropped silently. A plain-text record
(continued pre-training) longer than the window is cut into windows, each its own example
(`text_windows`), so no text is lost to truncation.
"""
from __future__ import annotations

from mens.data.formats import kind
from mens.data.pack import IGNORE, Example
from mens.errors import DataError


def run_encoder(tokenizer, spec):
    """The run's mens.data.encoder.RunEncoder over an already-loaded tokenizer: its own chat
    template (the embedded tiny rung's is ChatML: the same ids as mens.data.pack.tokenize_chat)."""
    from mens.data.encoder import RunEncoder

    return RunEncoder.load(tokenizer.name_or_path, getattr(spec, "data", None), tokenizer)


def _text_examples(enc, rec: dict, max_len: int, phase: int, stats: dict) -> list[Example]:
    """Plain text + EOS, labels = ids; windows of max_len tokens (the last may be shorter)."""
    ids = enc.text_ids(rec["text"])
    windows = [ids[i:i + max_len] for i in range(0, len(ids), max_len)] or [[]]
    stats["text_windows"] = stats.get("text_windows", 0) + len(windows)
    # a last window of one token predicts nothing (labels shift by one): counted, not kept
    stats["text_windows_dropped"] = stats.get("text_windows_dropped", 0) + sum(
        len(w) <= 1 for w in windows)
    return [Example(w, list(w), phase, f"{rec['id']}#{k}" if k else rec["id"])
            for k, w in enumerate(windows) if len(w) > 1]


def examples_for(records, tokenizer, spec, phases, pairs: bool, max_len: int | None = None,
                 encode=None):
    """{record id: Example} (SFT/text) or {id: (chosen, rejected, pair index)} (pairs; labeled
    records, KTO's: {id: (completion, KL completion, index, label)}), and stats. encode: a
    RunEncoder (default: run_encoder(tokenizer, spec))."""
    out, stats = {}, {"unsupervised_records_skipped": 0}
    max_len = max_len or spec.train.seq_len
    enc = encode or run_encoder(tokenizer, spec)
    encode = enc.encode

    def supervised(*labels) -> bool:   # the window cut off every answer token: nothing to learn
        if all(any(x != IGNORE for x in lab[1:]) for lab in labels):
            return True
        stats["unsupervised_records_skipped"] += 1
        return False

    # the second row of a pair (rejected) or of a KTO record (its KL row): truncation counted,
    # tool calls not (they are counted once, on the chosen / desirable-or-not row)
    kl_stats: dict = {}
    labeled = pairs and any(kind(r) == "labeled" for r in records)
    kl_answer = mismatched(records, spec.train.micro_batch) if labeled else {}
    def encode_one(r: dict) -> None:
        phase = phases.index(r["phase"])
        tools = r.get("tools")
        if pairs and kind(r) == "labeled":   # KTO: (completion, KL completion, index, label)
            ids, lab = encode(r["prompt"] + r["completion"], max_len, stats, tools)
            k_ids, k_lab = encode(r["prompt"] + kl_answer[r["id"]], max_len, kl_stats, tools)
            if supervised(lab, k_lab):
                out[r["id"]] = (Example(ids, lab, phase, r["id"]),
                                Example(k_ids, k_lab, phase, r["id"]), len(out), r["label"])
        elif pairs:
            c_ids, c_lab = encode(r["prompt"] + r["chosen"], max_len, stats, tools)
            r_ids, r_lab = encode(r["prompt"] + r["rejected"], max_len, kl_stats, tools)
            if supervised(c_lab, r_lab):
                out[r["id"]] = (Example(c_ids, c_lab, phase, r["id"]),
                                Example(r_ids, r_lab, phase, r["id"]), len(out))   # + pair index
        elif kind(r) == "text":
            for ex in _text_examples(enc, r, max_len, phase, stats):
                out[ex.record_id] = ex
        else:
            ids, labels = encode(r["messages"], max_len, stats, tools)
            if supervised(labels):
                out[r["id"]] = Example(ids, labels, phase, r["id"])

    for r in records:
        if r["id"] in out:   # an upsampled repeat: one example (and one pair index) per record
            continue
        try:
            encode_one(r)
        except DataError as e:   # the template refused or lost a call: name the record
            raise DataError(f"{r.get('where') or r['id']}: {e.message}", key=e.key) from None
    for k in ("truncated_records", "truncated_tokens"):
        if k in kl_stats:
            stats[k] = stats.get(k, 0) + kl_stats[k]
    if enc.notes:   # e.g. a system prompt folded into the first user turn: said, and recorded
        stats["template_notes"] = sorted(enc.notes)
    return out, stats


def mismatched(records, micro: int) -> dict:
    """{labeled record id: the completion its KL row pairs with its prompt} (KTO's KL baseline
    z₀ scores mismatched pairs): TRL's rotation, completions moved by one within each batch of
    micro_batch records in data order — (x₁, y_n), (x₂, y₁) … (x_n, y_{n−1}) — so a batch's
    mismatched answers are its own answers, paired with other prompts (a batch of one: its own).
    Upsampled repeats count once, as the examples do."""
    seen, out = {}, {}
    for r in records:
        if kind(r) == "labeled":
            seen.setdefault(r["id"], r)
    recs = list(seen.values())
    for i in range(0, len(recs), max(int(micro), 1)):
        chunk = recs[i:i + micro]
        for j, r in enumerate(chunk):
            out[r["id"]] = chunk[j - 1]["completion"]
    return out


def example_records(records, examples: dict) -> list[dict]:
    """The records that made an example, one per example: a plain text cut into windows
    becomes one record per window (id `<id>#k`), so the curriculum orders windows like records."""
    out = []
    for r in records:
        if r["id"] in examples:
            out.append(r)
        k = 1
        while f"{r['id']}#{k}" in examples:
            out.append({**r, "id": f"{r['id']}#{k}"})
            k += 1
    return out
