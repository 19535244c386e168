"""What every section of the schema shares: `auto`, and the Range a number's valid values are
checked against (mens.config.validate). Each stage's module (hw, rung, data, lane, train, gate,
publish, launch, synth, and each objective's card) keeps its own RANGES and CHOICES beside its
dataclasses; validate.py gathers them."""
from __future__ import annotations

import math
from dataclasses import dataclass

AUTO = "auto"


def show(value) -> str:
    """A number as the user likely typed it (`-3`, not OmegaConf's float `-3.0`)."""
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return str(int(value))
    return str(value)


def prefixed(prefix: str, table: dict) -> dict:
    """A section's own table ({"beta": …}) under its dotted key ({"lane.dpo.beta": …})."""
    return {f"{prefix}.{k}": v for k, v in table.items()}


@dataclass(frozen=True)
class Range:
    """A number's valid values: within [lo, hi] (an end excluded with lo_open / hi_open),
    finite, whole when `integer`; the values in `also` are sentinels accepted besides."""
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    also: tuple = ()
    note: str = ""          # what the value means / what its sentinels do
    example: str = "1"

    def accepts(self, v) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        if v in self.also:
            return True
        if not math.isfinite(v) or (self.integer and v != int(v)):
            return False
        if self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo)):
            return False
        return self.hi is None or (v < self.hi or (not self.hi_open and v == self.hi))

    def describe(self) -> str:
        noun = "integer" if self.integer else "number"
        lo, hi = (None if b is None else show(float(b)) for b in (self.lo, self.hi))
        if self.lo is not None and self.hi is not None and self.lo == self.hi:
            text = f"only {lo}"
        elif self.hi is None and self.lo == 0:
            text = f"a positive {noun}" if self.lo_open else f"a {noun} >= 0"
        elif self.hi is None and self.integer and self.lo == 1:
            text = "a positive integer"
        elif self.hi is None:
            text = f"a{'n' if self.integer else ''} {noun} {'>' if self.lo_open else '>='} {lo}"
        elif not self.lo_open and not self.hi_open:
            text = f"a{'n' if self.integer else ''} {noun} from {lo} to {hi}"
        else:
            text = (f"a{'n' if self.integer else ''} {noun} {'>' if self.lo_open else '>='} "
                    f"{lo} and {'<' if self.hi_open else '<='} {hi}")
        return " or ".join([*(show(float(a)) for a in self.also), text])


def pos(note: str = "", example: str = "1", **kw) -> Range:
    return Range(lo=0, lo_open=True, note=note, example=example, **kw)


def count(note: str = "", example: str = "1", **kw) -> Range:
    return Range(lo=1, integer=True, note=note, example=example, **kw)


def nonneg(note: str = "", example: str = "0", **kw) -> Range:
    return Range(lo=0, note=note, example=example, **kw)
