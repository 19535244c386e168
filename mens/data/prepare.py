"""The data stage, asked once by the run: records → what training and evaluation consume.

    read → normalise → clean → split → select    (select.py: the spoke's corpus, or the user's
                                                  data through sources.py, where the objective's
                                                  record kinds are checked)
    → tokenize (examples.py) → held-out sets → each epoch's counts (curriculum.py)

The train stage reads the Prepared it gets and never asks the data modules again: a record's
kind is told here, once per set, not re-asked by the trainer or the evaluator.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

from mens.data.curriculum import epoch_counts
from mens.data.examples import example_records, examples_for, run_encoder
from mens.data.formats import kind, turns
from mens.data.select import eval_records, run_records
from mens.errors import DataError


@dataclass
class Prepared:
    """What a run trains and scores on, tokenized with its own encoder."""
    label: str                 # the data's name: the spoke, `file:<stem>` or the dataset id
    records: list[dict]        # the records that made an example, one per example (curriculum)
    examples: dict             # {id: Example} or {id: (chosen, rejected, index[, …])}
    stats: dict                # the DATA telemetry row: what was read, removed, tokenized
    sets: dict                 # {role: (name, [Example] or [pair])}: the held-out sets, scored
    held_out: tuple            # (name, [chat]): the objective's own held-out measure reads these
    counts: list[dict] = field(default_factory=list)   # per epoch: records by phase (CURRICULUM)
    encoder: object = None     # the run's RunEncoder (grpo builds its prompts with it)


def prepare_data(spec, tokenizer, pairs: bool) -> Prepared:
    """The records this run trains on, their examples and the held-out sets. pairs: the
    objective trains on pair (or labeled) examples. Raises DataError when no record keeps a
    token to learn from within train.seq_len."""
    phases = list(spec.curriculum.phases)
    (records, stats, label), held = run_records(spec)
    encoder = run_encoder(tokenizer, spec)
    examples, tok_stats = examples_for(records, tokenizer, spec, phases, pairs, encode=encoder)
    skipped = tok_stats["unsupervised_records_skipped"]
    if skipped:   # counted in the DATA row, said on the console
        print(f"mens: skipped {skipped} of {len(records)} {label} records whose answer "
              f"lies wholly beyond train.seq_len={spec.train.seq_len} (no token to learn from)",
              file=sys.stderr)
    if not examples:
        raise DataError(f"no {label} record keeps an answer token within "
                        f"train.seq_len={spec.train.seq_len}: raise train.seq_len (or leave it "
                        f"auto).", key="train.seq_len")
    records = example_records(records, examples)
    return Prepared(
        label, records, examples,
        {**stats, **tok_stats, "spoke": spec.spoke.name, "data": label,
         "lock": list(getattr(spec, "data_lock", None) or [])},
        held_sets(spec, tokenizer, held, encoder),
        held_out_chats(held.get("eval") or (None, []), spec.train.eval_max_records),
        epoch_counts(records, list(spec.curriculum.caps), phases), encoder)


def eval_sets(spec, tokenizer, held: dict | None = None, encoder=None) -> dict:
    """{role: (name, [Example] or [(chosen, rejected, index)])} for the data's held-out split
    ("eval") and, unless turned off, one other spoke's ("collateral"). held: eval_records(spec)
    (read here when not given: compare scores a finished run's sets)."""
    return held_sets(spec, tokenizer, held if held is not None else eval_records(spec), encoder)


def held_sets(spec, tokenizer, held: dict, encoder=None) -> dict:
    """eval_sets of the held-out records a run already read (prepare_data's)."""
    out = {}
    phases = list(spec.curriculum.phases)
    for role, (name, recs) in held.items():
        recs = [dict(r, phase=r["phase"] if r.get("phase") in phases else phases[0])
                for r in recs][:spec.train.eval_max_records]
        which = kind(recs[0]) if recs else None   # one set holds one kind
        if which == "labeled":   # KTO's held-out split (user data)
            recs = desirable_as_chats(name, recs)
        # held-out records are scored whole (up to the rung's positions, at most 4096), not cut
        # to the training window: a cut could drop the very answer being scored
        exs, _ = examples_for(recs, tokenizer, spec, phases, pairs=which == "pair",
                              max_len=min(spec.rung.max_position_embeddings, 4096),
                              encode=encoder)
        out[role] = (name, list(exs.values()))
    return out


def desirable_as_chats(name: str, recs: list) -> list:
    """Held-out labeled records (KTO) → their desirable answers as chats: the held-out loss is
    the NLL of the answers wanted (an undesirable one's NLL would reward learning it). No KTO
    loss is computed on held-out data; said once per set."""
    good = [{**r, "messages": r["prompt"] + r["completion"]} for r in recs if r["label"]]
    print(f"mens: held-out {name}: {len(good)} desirable of {len(recs)} labeled records scored "
          f"as an answer NLL (no held-out KTO loss)", file=sys.stderr)
    return good


def held_out_chats(held: tuple, cap: int | None) -> tuple:
    """(name, chats) of the data's held-out split for an objective's own measure (grpo's oracle
    pass rate): a pair or labeled record's prompt is its conversation's head as a chat's is;
    plain text has none. At most `cap` (train.eval_max_records)."""
    name, recs = held
    return name, [r if kind(r) == "chat" else {**r, "messages": turns(r)}
                  for r in recs if kind(r) != "text"][:cap]
