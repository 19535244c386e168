"""The objectives mens trains, each declared once: its module here holds its lane section's
dataclass (lane.<name>, with TRL's defaults), that section's valid values and its card
(mens.config.card: the torch-free facts config, data and plan read). The training side (batch →
loss) is the module its card names under mens.objective — a separate module because config,
data and plan sit below mens.objective in the package order and import no torch
(tests/test_imports.py).

A new objective: its card module here, registered in NAMES (the one line), its training module
under mens.objective, its option file conf/lane/NAME.yaml, its tests.
"""
from __future__ import annotations

import importlib

from mens.config.card import Card

# The registry: one name per objective (mens.config.cards.<name>.CARD), in the order
# lane.objective lists them and LaneConfig holds their sections.
NAMES = ("sft", "dpo", "orpo", "simpo", "kto", "grpo", "distill")

CARDS: dict[str, Card] = {}
_sealed: list[str] = []   # who read the registry to build a schema (registering after: refused)


def register(card: Card) -> None:
    """Add an objective (a card declared outside NAMES: a plug-in, a test's toy). Only before the
    schema is built (mens.config.lane reads the cards once, for LaneConfig's sections)."""
    if _sealed:
        raise RuntimeError(f"objective `{card.name}` registered after {_sealed[0]} read the "
                           f"registry: register objectives before mens.config.schema is imported.")
    if card.name in CARDS or not card.name.isidentifier():
        raise RuntimeError(f"objective `{card.name}`: registered twice or not an identifier.")
    CARDS[card.name] = card


def seal(reader: str) -> dict[str, Card]:
    """The registry, read once by `reader` to build the schema; no registration after it."""
    _sealed.append(reader)
    return CARDS


for _name in NAMES:
    register(importlib.import_module(f"mens.config.cards.{_name}").CARD)
