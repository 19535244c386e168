"""Training objectives: what the weights are trained toward (SFT, DPO, ORPO, SimPO, KTO, GRPO,
on-policy distillation), crossed with the lane's method (LoRA, QLoRA, full) that says how they
train. One module per objective owns its batch, loss, reference pass and metrics; the torch-free
facts the config, data and planning stages read are its card, declared once in
mens.config.cards.<name>, which names the class here that trains it."""
from __future__ import annotations

import importlib

from mens.config.cards import CARDS
from mens.errors import ConfigError


def build(spec):
    """The lane's objective (mens.objective.base.Objective) for a RunSpec: the class its card
    names ("module:Class", imported on use: each pulls torch)."""
    name = getattr(spec.lane, "objective", None) or "sft"
    train = CARDS[name].train if name in CARDS else ""
    if not train:
        trains = [n for n, c in CARDS.items() if c.train]
        raise ConfigError(f"lane.objective={name} has no training module in this mens yet "
                          f"(trains: {', '.join(trains)}): use one of those.",
                          key="lane.objective")
    module, cls = train.split(":")
    return getattr(importlib.import_module(module), cls)(spec)
