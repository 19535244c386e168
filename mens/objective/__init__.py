"""Training objectives: what the weights are trained toward (SFT, DPO, ORPO, SimPO, KTO, GRPO,
on-policy distillation), crossed with the lane's method (LoRA, QLoRA, full) that says how they
train. One module per objective owns its batch, loss, reference pass and metrics; the torch-free
facts the config, data and planning stages read are its card in mens.config.objectives."""
from __future__ import annotations

import importlib

from mens.errors import ConfigError

# objective name → "module:Class" (imported on use: each pulls torch)
REGISTRY = {"sft": "mens.objective.sft:Sft", "dpo": "mens.objective.dpo:Dpo",
            "orpo": "mens.objective.orpo:Orpo", "simpo": "mens.objective.simpo:Simpo",
            "kto": "mens.objective.kto:Kto", "grpo": "mens.objective.grpo:Grpo",
            "distill": "mens.objective.distill:Distill"}


def build(spec):
    """The lane's objective (mens.objective.base.Objective) for a RunSpec."""
    name = getattr(spec.lane, "objective", None) or "sft"
    if name not in REGISTRY:
        raise ConfigError(f"lane.objective={name} has no training module in this mens yet "
                          f"(trains: {', '.join(REGISTRY)}): use one of those.",
                          key="lane.objective")
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)(spec)
