"""SimPO on preference pairs, no reference: a length-normalised reward with a target margin. Its
section lane.simpo, valid values and card. Training: mens.objective.simpo."""
from __future__ import annotations

from dataclasses import dataclass

from mens.config.card import Card, StepCost
from mens.config.ranges import nonneg, pos


@dataclass
class SimpoConfig:
    beta: float = 2.0                # the reward scale of the length-normalised log-prob
    gamma_beta_ratio: float = 0.5    # the target margin γ as a fraction of β


RANGES = {
    "beta": pos("SimPO's reward scale (the SimPO paper's 2.0; TRL's CPOConfig 0.1)",
                "2.0"),
    "gamma_beta_ratio": nonneg("SimPO's target margin γ over β (the paper's 0.5; "
                               "TRL's simpo_gamma = this × β)", "0.5"),
}
CARD = Card("simpo", "pairs", (), lambda lane: 2, "none", False, ("pair_rows",),
            lambda g, ref: StepCost((2,), where=(
                "mens/objective/simpo.py: Simpo.step scores chosen + rejected rows; "
                "no reference")),
            train="mens.objective.simpo:Simpo", config=SimpoConfig, ranges=RANGES)
