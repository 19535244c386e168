"""ORPO on preference pairs, no reference: an odds-ratio term beside the SFT loss. Its section
lane.orpo, valid values and card. Training: mens.objective.orpo."""
from __future__ import annotations

from dataclasses import dataclass

from mens.config.card import Card, StepCost
from mens.config.ranges import pos


@dataclass
class OrpoConfig:
    beta: float = 0.1                # λ: the weight of the odds-ratio term beside the SFT loss


RANGES = {
    "beta": pos("the weight λ of ORPO's odds-ratio term (TRL's default 0.1)", "0.1"),
}
# ORPO's NLL (TRL's: prompt + answer) runs the chosen rows a second time: three rows
CARD = Card("orpo", "pairs", (), lambda lane: 3, "none", False, ("pair_rows",),
            lambda g, ref: StepCost((2, 1), where=(
                "mens/objective/orpo.py: Orpo.step scores chosen + rejected rows, then the "
                "chosen rows again for the NLL (prompt_and_answer); no reference")),
            train="mens.objective.orpo:Orpo", config=OrpoConfig, ranges=RANGES)
