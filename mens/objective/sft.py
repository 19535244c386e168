"""SFT: the causal-LM loss on the assistant tokens of packed rows (the module's token-weighted
path: one optimizer step's loss is its summed NLL over every supervised token of the group)."""
from __future__ import annotations

from mens.objective.base import Objective, Step


class Sft(Objective):
    name = "sft"

    def step(self, ctx: Step, batch: dict):
        loss, logged = ctx.lm_loss(batch)
        return loss, {"loss": logged}
