"""Admission checks: the gate every corpus record passes before tools/make_corpus.py writes it.

`CHECKS[name](record) -> True | False | None`; None means the check's tool is missing here, so
the record is kept but counted *unverified* — never silently passed. This is the boolean face
of mens.synth.oracle_checks, where each check is implemented once, with diagnostics: a single
record of a pure-Python check runs in-process (mens's own templates), bash and cargo — and
every batch (`check_all`) — run through mens.synth.oracle, in a limited child process. Model
output (synthesis) goes to mens.synth.oracle.judge for the verdict with its diagnostics.

Vox, the house scripting language, is defined by its reference parser in mens/synth/vox.py;
`vox_parses` is its admission check.
"""
from __future__ import annotations

import shutil  # noqa: F401  the same module oracle finds tools with (tests patch shutil.which)
from pathlib import Path  # noqa: F401  ditto: oracle looks for ~/.cargo/bin via Path.home()
from typing import Callable

from mens.synth import oracle_checks as oc
from mens.synth.oracle import judge_batch
from mens.synth.oracle_checks import (SKILL_NAME, TOOL_CALL, TOOLS, answers, blocks,
                                     declared_tools, fences, schema_errors, tool_calls)

__all__ = ["CHECKS", "BATCH", "check_all", "check_shell_batch", "check_rust_batch", "vox_parses",
           "python_parses", "shell_syntax", "rust_compiles", "tool_call_schema",
           "transcript_structure", "mesh_messages", "skill_frontmatter", "arith_answer",
           "answer_first", "SKILL_NAME",
           "TOOL_CALL", "TOOLS", "answers", "blocks", "declared_tools", "fences", "schema_errors",
           "tool_calls"]


def _passes(name: str) -> Callable[[dict], bool]:
    def check(rec: dict) -> bool:
        return not oc.CHECKS[name](rec)
    check.__name__, check.__doc__ = name, oc.CHECKS[name].__doc__
    return check


vox_parses = _passes("vox_parses")
python_parses = _passes("python_parses")
tool_call_schema = _passes("tool_call_schema")
transcript_structure = _passes("transcript_structure")
mesh_messages = _passes("mesh_messages")
skill_frontmatter = _passes("skill_frontmatter")
arith_answer = _passes("arith_answer")
answer_first = _passes("answer_first")


def check_shell_batch(records: list[dict]) -> list[bool | None]:
    """`bash -n` on every bash/sh block; one bash process checks all of them (fast)."""
    return [v.passed for v in judge_batch("shell_syntax", records)]


def check_rust_batch(records: list[dict], cargo: str | None = None) -> list[bool | None]:
    """All ```rust blocks in ONE scratch crate, `cargo check --offline --tests`; ```toml blocks
    must parse (tomllib). No cargo here → None for every record with Rust code."""
    return [v.passed for v in judge_batch("rust_compiles", records, cargo=cargo)]


def shell_syntax(rec: dict) -> bool | None:
    return check_shell_batch([rec])[0]


def rust_compiles(rec: dict) -> bool | None:
    return check_rust_batch([rec])[0]


CHECKS: dict[str, Callable[[dict], bool | None]] = {
    "vox_parses": vox_parses, "rust_compiles": rust_compiles, "shell_syntax": shell_syntax,
    "tool_call_schema": tool_call_schema, "transcript_structure": transcript_structure,
    "python_parses": python_parses, "mesh_messages": mesh_messages,
    "skill_frontmatter": skill_frontmatter, "arith_answer": arith_answer,
    "answer_first": answer_first,
}
# Checks that run many records in one tool invocation (the generator uses these).
BATCH: dict[str, Callable[[list[dict]], list[bool | None]]] = {
    "rust_compiles": check_rust_batch, "shell_syntax": check_shell_batch,
}


def check_all(name: str, records: list[dict]) -> list[bool | None]:
    """One verdict per record, through the oracle (one child process for the batch); raises
    mens.errors.ConfigError on an unknown check name."""
    return [v.passed for v in judge_batch(name, records)]
