"""Each training objective's torch-free facts (its card): what validation, planning and data
selection ask instead of testing the objective's name — the lookups over the registry.

A lane is a method (lora | qlora | full: how the weights train) × an objective (what they train
toward). Each objective declares its card once, in mens.config.cards.<name> (mens.config.card:
what a card holds); its training side (batch → loss) is the module the card names.
"""
from __future__ import annotations

from omegaconf import OmegaConf

from mens.config.card import (ORACLE_WORKERS, RECORDS, Card, StepCost,  # noqa: F401 (re-exported)
                              read, section)
from mens.config.cards import CARDS
from mens.config.schema import METHODS, OBJECTIVES
from mens.errors import ConfigError

# the schema's lane.objective choices are the registry's: checked at import (`python -O` too)
if tuple(CARDS) != OBJECTIVES:
    raise RuntimeError(f"mens.config.cards.CARDS ({', '.join(CARDS)}) and "
                       f"mens.config.schema.OBJECTIVES ({', '.join(OBJECTIVES)}) disagree: every "
                       f"objective needs one card, in the same order.")


def card(lane_or_name) -> Card:
    """The card of a lane's objective (a lane node, or the objective's name)."""
    name = lane_or_name if isinstance(lane_or_name, str) else \
        (read(lane_or_name, "objective") or "sft")
    if name not in CARDS:
        raise ConfigError(f"`lane.objective={name}` is not valid: it takes one of "
                          f"{', '.join(OBJECTIVES)}.", key="lane.objective")
    return CARDS[name]


def label(lane) -> str:
    return card(lane).label(lane)


# a data format's kind (mens.data.formats.DATA_KIND) → the record kind a card names
RECORD_OF = {"sft": "chat", "text": "chat", "preference": "pairs", "labeled": "labeled"}
WANT = {"chat": "SFT records (chat, ShareGPT, Alpaca, prompt/completion or text)",
        "pairs": "preference pairs (prompt/chosen/rejected)",
        "labeled": "labeled records (prompt/completion/label)", "prompts": "prompts"}


# a record kind → the objective that trains on it first (the hint of a mismatch error)
FOR_DATA = {have: next(n for n, c in CARDS.items() if c.record == have)
            for have in dict.fromkeys(RECORD_OF.values())}


# lane.kind (before a lane was method × objective) → the keys that replace it
RETIRED_KINDS = {"lora": {"method": "lora"}, "qlora": {"method": "qlora"},
                 "full": {"method": "full"}, "dpo": {"method": "lora", "objective": "dpo"}}


def kind_to_keys(kind: str) -> dict:
    if kind not in RETIRED_KINDS:
        raise ConfigError(f"`lane.kind={kind}` is not valid: lane.kind is a retired key (it took "
                          f"{', '.join(RETIRED_KINDS)}); use lane.method ({', '.join(METHODS)}) "
                          f"and lane.objective ({', '.join(OBJECTIVES)}).", key="lane.kind")
    return RETIRED_KINDS[kind]


def upgrade_lane(saved, where: str = "") -> list[str]:
    """An earlier mens's lane in a spec.yaml (a DictConfig, changed in place): `kind` → method
    (+ objective); an objective's or the quantization section written as null dropped (the
    schema's defaults stand: they are read only by that objective, or by method qlora).
    Returns what it did, one line each (the caller says them)."""
    lane = OmegaConf.select(saved, "lane", default=None)
    said = []
    if lane is None:
        return said
    if "kind" in lane:
        kind = lane.pop("kind")
        keys = kind_to_keys(kind)
        for k, v in keys.items():
            lane[k] = v
        said.append(f"{where}`lane.kind={kind}` is retired: read as "
                    + " ".join(f"lane.{k}={v}" for k, v in keys.items()))
    for name in (*OBJECTIVES[1:], "quantization"):
        if name in lane and lane[name] is None:
            lane.pop(name)
    return said


def lane_fields(lane) -> dict:
    """{lane, method, objective} for summaries, telemetry and tables: `lane` is the card's label
    (lora, lora-dpo …). Reads a lane node or a saved spec's plain dict, an earlier mens's
    `kind` too (a run dir written before objectives)."""
    if lane is None:
        return {"lane": None, "method": None, "objective": None}
    if isinstance(lane, dict) and "method" not in lane and lane.get("kind"):
        lane = {**lane, **kind_to_keys(lane["kind"])}
    method, objective = read(lane, "method"), (read(lane, "objective") if
                                               not isinstance(lane, dict) else
                                               lane.get("objective")) or "sft"
    c = card(objective)
    return {"lane": c.label({"method": method}), "method": method, "objective": objective}
