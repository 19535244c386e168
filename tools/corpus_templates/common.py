"""What every spoke's templates share: the split-aware context and message builders.

Held-out by construction: `Ctx.pick` partitions every pool of three or more items (names,
topics, numbers, phrasings) by index — each third item is eval-only, the rest train-only — so
an eval record is built from words and wordings no training record uses. The generator still
decontaminates eval records against every training record (12-gram test) and counts what it
drops; the partition is what keeps that count small.
"""
from __future__ import annotations

import hashlib
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


# ---- tool use (mcp_tool_chain, agent_harness): OpenAI's structured form, as mens.data.tools keeps
# it, so each model family's own chat template writes the calls in its own syntax
def schema(name: str, description: str, parameters: dict) -> dict:
    """A tool's declaration as a record's `tools` lists it."""
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": parameters}}


def fn(name: str, args: dict) -> dict:
    """One call (its id is given by tool_record, which knows the record)."""
    return {"type": "function", "function": {"name": name, "arguments": args}}


def act(text: str, *calls: dict) -> dict:
    """An assistant turn that calls tools: its text (may be "") and the calls after it."""
    return {"role": "assistant", "content": text.strip("\n"), "tool_calls": list(calls)}


def call_id(seed: str, k: int) -> str:
    """The k-th call's id in a record: 9 alphanumeric characters (Mistral's templates refuse any
    other id), derived from the record's first user turn so the corpus stays byte-identical."""
    return hashlib.blake2b(f"{seed}\x00{k}".encode(), digest_size=16).hexdigest()[:9]


def tool_record(messages: list[dict], tools: list[dict], difficulty: int, phase: str,
                strategy: str) -> dict:
    """A record with `tools`: every call gets an id, and each tool turn answers the next open call
    of the assistant turn before it (in order), by `tool_call_id` and `name`. A tool turn with no
    call to answer, or a call left unanswered, is a template bug: it fails loudly."""
    seed = next(m["content"] for m in messages if m["role"] == "user")
    out, pending, k = [], [], 0
    for m in messages:
        if m["role"] == "tool":
            assert pending, (strategy, "a tool result answers no call", m["content"][:80])
            c = pending.pop(0)
            m = {"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"],
                 "content": m["content"]}
        else:
            assert not pending, (strategy, "calls left unanswered", pending)
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                calls.append({"id": call_id(seed, k), **c})
                k += 1
            m = {**m, "tool_calls": calls}
            pending = list(calls)
        out.append(m)
    assert not pending, (strategy, "calls left unanswered", pending)
    names = {t["function"]["name"] for t in tools}
    assert all(c["function"]["name"] in names for m in out for c in m.get("tool_calls", [])), \
        (strategy, "a call to an undeclared tool")
    return {**record(out, difficulty, phase, strategy), "tools": tools}


def pair(prompt: list[dict], chosen: str, rejected: str, difficulty: int, phase: str,
         strategy: str) -> dict:
    assert 1 <= difficulty <= 10 and phase in PHASES, (difficulty, phase, strategy)
    return {"prompt": prompt, "chosen": [msg("assistant", chosen)],
            "rejected": [msg("assistant", rejected)], "difficulty": difficulty, "phase": phase,
            "strategy": strategy}


def clamp(d: int) -> int:
    return max(1, min(10, d))
