"""KTO on labeled records (prompt/completion/label), against a frozen reference. Its section
lane.kto, valid values and card. Training: mens.objective.kto."""
from __future__ import annotations

from dataclasses import dataclass

from mens.config.card import Card, StepCost
from mens.config.ranges import pos


@dataclass
class KtoConfig:
    beta: float = 0.1
    desirable_weight: float = 1.0    # λ_D: weight of records labelled desirable (label true)
    undesirable_weight: float = 1.0  # λ_U: weight of records labelled undesirable


RANGES = {
    "beta": pos("the KTO temperature (TRL's default 0.1)", "0.1"),
    "desirable_weight": pos("the weight of desirable records", "1.0"),
    "undesirable_weight": pos("the weight of undesirable records", "1.0"),
}
# unpaired: a pair becomes a desirable and an undesirable record (mens.data.formats.unpair)
# the reference (both rows: the completion and its KL row) precomputed, as dpo's
CARD = Card("kto", "labeled", ("pairs",), lambda lane: 1, "always", False, ("reference_pass",),
            lambda g, ref: StepCost((1,), forward=1, reference=2 if ref else 0,
                                    forward_what="KL-row forward", where=(
                "mens/objective/kto.py: Kto.step scores the completion row, and its KL row "
                "under no_grad; Kto.prepare scores both with the reference once")),
            train="mens.objective.kto:Kto", config=KtoConfig, ranges=RANGES)
