"""SFT: the causal-LM loss on the answers of chat records (packed into rows). No section of its
own: the lane's method, optimizer and train keys are all it reads. Training: mens.objective.sft."""
from __future__ import annotations

from mens.config.card import Card, StepCost

CARD = Card("sft", "chat", (), lambda lane: 1, "none", False, (),
            lambda g, ref: StepCost((1,), where="mens/objective/sft.py: one packed row"),
            train="mens.objective.sft:Sft")
