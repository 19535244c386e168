"""DPO on preference pairs (prompt/chosen/rejected) against a frozen reference: its section
lane.dpo, valid values and card. Training: mens.objective.dpo."""
from __future__ import annotations

from dataclasses import dataclass

from mens.config.card import Card, StepCost
from mens.config.ranges import pos

# DPO losses mens.objective.dpo implements (TRL's DPOTrainer loss_type names)
LOSSES = ("sigmoid", "hinge", "ipo")


# Each objective's section, with TRL's defaults (its *Config classes): only the selected
# objective's section is validated (mens.config.validate) and read.
# Each objective's section, with TRL's defaults (its *Config classes): only the selected
# objective's section is validated (mens.config.validate) and read.
@dataclass
class DpoConfig:
    beta: float = 0.1                # > 0: the temperature of the implicit reward
    loss: str = "sigmoid"            # sigmoid | hinge | ipo (LOSSES; TRL's loss_type names)


RANGES = {
    "beta": pos("the DPO temperature (TRL's default 0.1)", "0.1"),
}
CHOICES = {
    "loss": list(LOSSES),
}
# chosen and rejected of each pair in one micro-batch: twice the rows
CARD = Card("dpo", "pairs", (), lambda lane: 2, "always", False, ("pair_rows", "reference_pass"),
            lambda g, ref: StepCost((2,), reference=2 if ref else 0, where=(
                "mens/objective/dpo.py: Dpo.step scores chosen + rejected rows; "
                "Dpo.prepare scores both with the reference once (reference_logps)")),
            train="mens.objective.dpo:Dpo", config=DpoConfig, ranges=RANGES, choices=CHOICES)
