"""arith: arithmetic answered as <answer>N</answer> (issue #39), the verifiable task of the RL
lanes. The problems, phrasings and answers are mens.synth.arith's (one owner); here they are
drawn per split (Ctx.pick partitions the phrasings: a held-out record's wording is never
trained on) and staged by difficulty for the curriculum: single digits without a carry
(warmup), with a carry (syntax), a two-digit operand and differences (reasoning), a follow-up
question after an answered one (multi_turn), two-digit sums and small products
(orchestration: the hardest stage; the phase names are the curriculum's, shared by spokes).
`direct` answers with the tag alone, `worked` writes the equation first."""
from __future__ import annotations

from mens.synth import arith

from .common import msg, record

STAGES = [  # (phase, difficulty, level, operators kept)
    ("warmup", 1, 1, "+"), ("syntax", 3, 1, "+"), ("reasoning", 5, 2, "+"),
    ("reasoning", 6, 4, "-"), ("multi_turn", 7, 3, "+"), ("orchestration", 9, 3, "+"),
    ("orchestration", 10, 5, "*")]
WEIGHTS = [3, 3, 2, 2, 2, 2, 2]   # the curriculum caps (4, 7, 10) each admit ≥ 1.25× more


def _problem(c, level: int, ops: str, difficulty: int):
    pool = [p for p in arith.problems(level) if p[1] in ops]
    if level == 1:     # warmup: no carry; syntax: a carry
        pool = [p for p in pool if (p[0] + p[2] < 10) == (difficulty == 1)]
    return c.choice(pool)


def _item(style: str, phase: str, difficulty: int, level: int, ops: str):
    def build(c):
        a, op, b = _problem(c, level, ops, difficulty)
        user = c.pick(arith.PHRASINGS).format(e=arith.expression(a, op, b))
        msgs = [msg("system", arith.SYSTEM)]
        if phase == "multi_turn":     # an answered question first: the record's own context
            x, xop, y = _problem(c, 1, "+", 3)
            msgs += [msg("user", c.pick(arith.PHRASINGS).format(e=arith.expression(x, xop, y))),
                     msg("assistant", arith.answer_text(x, xop, y, style))]
        msgs += [msg("user", user), msg("assistant", arith.answer_text(a, op, b, style))]
        return record(msgs, difficulty + (c.randint(0, 1) if difficulty in (1, 3, 7) else 0),
                      phase, f"{style}_{phase}_{level}")
    build.__name__ = f"{style}_{phase}_{difficulty}"
    return build


SOURCES = {style: [(w, _item(style, *s)) for w, s in zip(WEIGHTS, STAGES)]
           for style in ("direct", "worked")}
