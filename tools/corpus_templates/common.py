"""What every spoke's templates share: the split-aware context and message builders.

Held-out by construction: `Ctx.pick` partitions every pool of three or more items (names,
topics, numbers, phrasings) by index — each third item is eval-only, the rest train-only — so
an eval record is built from words and wordings no training record uses. The generator still
decontaminates eval records against every training record (12-gram test) and counts what it
drops; the partition is what keeps that count small.
"""
from __future__ import annotations

import json
import random

PHASES = ["warmup", "syntax", "reasoning", "tool_call", "multi_turn", "orchestration", "agentic"]


class Ctx:
    def __init__(self, rng: random.Random, split: str, terse: bool = False):
        self.rng, self.split, self.terse = rng, split, terse

    def part(self, items):
        if len(items) < 3:
            return list(items)
        return [x for i, x in enumerate(items) if (i % 3 == 2) == (self.split == "eval")]

    def pick(self, items):
        """A split-partitioned choice (see module doc)."""
        return self.rng.choice(self.part(items))

    def picks(self, items, k: int) -> list:
        pool = self.part(items)
        return self.rng.sample(pool, min(k, len(pool)))

    def choice(self, items):
        """An unpartitioned choice: for syntax and structure both splits must share."""
        return self.rng.choice(items)

    def randint(self, a: int, b: int) -> int:
        return self.rng.randint(a, b)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def prose(self, *parts: str) -> str:
        """Explanation text; a terse record (rated low) gets none, only the artefact."""
        return "" if self.terse else " ".join(p for p in parts if p)


def msg(role: str, content: str) -> dict:
    return {"role": role, "content": content.strip("\n")}


def fence(lang: str, body: str) -> str:
    return f"```{lang}\n{body.strip(chr(10))}\n```"


def join(*parts: str) -> str:
    """Paragraphs, skipping empty ones (terse records drop their prose)."""
    return "\n\n".join(p.strip("\n") for p in parts if p and p.strip())


def jdump(obj) -> str:
    return json.dumps(obj, ensure_ascii=False)


def record(messages: list[dict], difficulty: int, phase: str, strategy: str) -> dict:
    assert 1 <= difficulty <= 10 and phase in PHASES, (difficulty, phase, strategy)
    return {"messages": messages, "difficulty": difficulty, "phase": phase, "strategy": strategy}


def pair(prompt: list[dict], chosen: str, rejected: str, difficulty: int, phase: str,
         strategy: str) -> dict:
    assert 1 <= difficulty <= 10 and phase in PHASES, (difficulty, phase, strategy)
    return {"prompt": prompt, "chosen": [msg("assistant", chosen)],
            "rejected": [msg("assistant", rejected)], "difficulty": difficulty, "phase": phase,
            "strategy": strategy}


def clamp(d: int) -> int:
    return max(1, min(10, d))
