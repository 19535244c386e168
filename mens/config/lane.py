"""The `lane` group's schema (conf/lane/*.yaml): a method (lora | qlora | full: how the weights
train, with its LoRA, quantization and optimizer sections) × an objective (what they train
toward: lane.objective, whose section lane.<objective> its card module in mens.config.cards
declares), with their valid values."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import MISSING

from mens.config.card import METHODS
from mens.config.cards import seal
from mens.config.ranges import AUTO, Range, count, nonneg, prefixed

# PEFT target names of every linear layer in a Qwen3 decoder layer: the one list of LoRA targets
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
CARDS = seal("mens.config.lane")   # every objective registered (mens.config.cards)
OBJECTIVES = tuple(CARDS)


@dataclass
class LoraConfig:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    targets: List[str] = field(default_factory=lambda: list(LORA_TARGETS))
    # a mixture of experts: LoRA on every expert's fused weights too (PEFT target_parameters);
    # false: the experts stay frozen. An error on a dense family.
    experts: bool = False
    # a mixture of experts: LoRA on the router too (gpt-oss `router`, Qwen3-MoE / Mixtral /
    # Qwen3.5-MoE `gate`). false, as PEFT's, TRL's and Unsloth's recipes leave it, so the
    # trainable count is theirs. An error on a dense family.
    router: bool = False


@dataclass
class QuantConfig:
    type: str = "nf4"                # bitsandbytes 4-bit NormalFloat
    double_quant: bool = True        # quantise the absmax constants too (~0.4 bit/param saved)
    blocksize: int = 64              # only 64: what training's BitsAndBytesConfig uses


@dataclass
class OptimizerConfig:
    name: str = "adamw"              # adamw | adamw_8bit | sgd
    lr: Any = AUTO                   # auto: the rung's lora_lr (lora/qlora) or full_lr (full)
    weight_decay: float = 0.0
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])


def _with_sections(cls):
    """Each objective's section after the lane's own keys (lane.dpo, lane.grpo …), in the
    registry's order: the dataclass its card declares, with its defaults."""
    for name, card in CARDS.items():
        if card.config is not None:
            cls.__annotations__[name] = card.config
            setattr(cls, name, field(default_factory=card.config))
    return cls


@dataclass
@_with_sections
class LaneConfig:
    name: str = MISSING
    method: str = MISSING            # lora | qlora | full (METHODS): how the weights train
    objective: str = "sft"           # sft | dpo | orpo | simpo | kto | grpo | distill (OBJECTIVES:
    #                                  the cards of mens.config.cards; each one's section below)
    precision: str = AUTO            # auto | bf16 | fp16 | fp32  (auto: the tier's default)
    gradient_checkpointing: Any = AUTO   # auto | true | false
    lora: Optional[LoraConfig] = None
    quantization: QuantConfig = field(default_factory=QuantConfig)   # read by method qlora only
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)


# Every number of the lane's sections and its valid values (mens.config.validate); an
# objective's own come from its card, under lane.<name>
RANGES = {
    "lane.lora.r": count("the LoRA rank", "16"),
    "lane.lora.alpha": count("the LoRA scale numerator (scaling = alpha / r)", "32"),
    "lane.lora.dropout": Range(lo=0, hi=1, hi_open=True, example="0.0",
                               note="a probability"),
    "lane.quantization.blocksize": Range(
        lo=64, hi=64, integer=True, example="64",
        note="training loads 4-bit weights through transformers' BitsAndBytesConfig, which has "
             "no blocksize setting (bitsandbytes' default, 64, is what the run uses)"),
    "lane.optimizer.weight_decay": nonneg("decoupled weight decay", "0.01"),
    "lane.optimizer.betas[]": Range(lo=0, hi=1, hi_open=True, example="[0.9,0.999]",
                                    note="Adam's two moment decay rates"),
    **{k: v for name, c in CARDS.items() for k, v in prefixed(f"lane.{name}", c.ranges).items()},
}
CHOICES = {
    "lane.method": list(METHODS),
    "lane.objective": list(OBJECTIVES),
    "lane.precision": ["auto", "bf16", "fp16", "fp32"],
    "lane.quantization.type": ["nf4", "fp4"],
    "lane.optimizer.name": ["adamw", "adamw_8bit", "sgd"],
    **{k: v for name, c in CARDS.items() for k, v in prefixed(f"lane.{name}", c.choices).items()},
}
