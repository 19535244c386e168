"""Records → Examples with the run's own tokenizer: upsampled repeats and pair indices."""
from __future__ import annotations

from mens.data.corpus import load_jsonl
from mens.data.examples import examples_for
from mens.model.load import load_tokenizer
from mens.resources import CORPORA


def test_an_upsampled_pair_keeps_one_pair_index(compile_run):
    """load_spoke upsamples a short source, so a record id can come twice. Each pair must keep
    the one index of its reference log-probs row: a repeat used to take the next pair's index,
    so two pairs shared one reference row (DPO then trained against a wrong reference)."""
    spec, _ = compile_run("+hw=cpu", "spoke=skill_creation", "lane=dpo", "train.seq_len=512")
    tok = load_tokenizer(spec.rung)
    a, b, c = load_jsonl(CORPORA / "skill_creation" / "skill_pairs.jsonl")[:3]
    phases = list(spec.curriculum.phases)
    out, _ = examples_for([a, b, a, c], tok, spec, phases, pairs=True)
    assert list(out) == [a["id"], b["id"], c["id"]]
    assert [pair[2] for pair in out.values()] == [0, 1, 2]
