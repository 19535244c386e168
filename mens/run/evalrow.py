"""One eval metric row, typed, and its one reading (torch-free): every place that prints an
eval number — `mens eval` and eval.md, the gate's receipt, the pushed model card, `mens
compare`, the ladder's badge, the studio (its API sends these strings) — formats it here, so
one row reads the same everywhere.

    MetricRow.of(row_dict)      -> the row of eval.json (mens/eval/__init__.py documents it)
    row.text(side)              -> "55.0 [45.0, 65.0]" (base, tuned, delta),
                                   "+4.0 [-1.0, +9.0] pts" (gain)
    row.display()               -> {side: text} for base, tuned, delta, gain (the studio's API)
    value_text(stat, rate), gain_text(stat, rate), is_rate(row_dict)

A rate in [0, 1] (a pass rate, an accuracy, a win rate) reads in percent with one decimal and
its gain in points; a loss reads with 4 decimals and its gain — the share of the base's loss
removed (mens computes it relative) — in %; any other number (lm-eval's perplexities, bits per
byte, BLEU/chrF/TER: not fractions) reads with 4 decimals and its gain in its own units, as
lm-eval's aggregate row carries it. The numbers stay in eval.json as they are; only the reading
is here.
It lives in mens.run, beside gate.json's reader (receipt.py), because every package that shows
an eval.json reads it: eval, compare (which eval itself imports), the gate, push and the studio.
"""
from __future__ import annotations

from dataclasses import dataclass

SIDES = ("base", "tuned", "delta", "gain")
NONE = "—"
# lm-eval's metrics whose values are not fractions in [0, 1]: never read as percent
NOT_RATES = frozenset({"perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte",
                       "bleu", "chrf", "ter", "brier_score"})


@dataclass(frozen=True)
class Stat:
    """One number with its interval: {"value", "ci": [lo, hi], "n", "method", "p"}."""
    value: float | None = None
    ci: tuple[float, float] | None = None
    n: int | None = None
    method: str | None = None
    p: float | None = None

    @classmethod
    def of(cls, d: dict | Stat | None) -> Stat | None:
        if d is None or isinstance(d, Stat):
            return d
        ci = d.get("ci")
        return cls(value=d.get("value"), ci=tuple(ci[:2]) if ci else None, n=d.get("n"),
                   method=d.get("method"), p=d.get("p"))


@dataclass(frozen=True)
class MetricRow:
    """A metric row of eval.json; the fields every printer reads (the dict keeps the rest)."""
    name: str
    group: str | None = None
    metric: str | None = None
    n: int | None = None
    higher_is_better: bool | None = None
    version: str | None = None
    base: Stat | None = None
    tuned: Stat | None = None
    delta: Stat | None = None
    gain: Stat | None = None

    @classmethod
    def of(cls, d: dict, name: str | None = None) -> MetricRow:
        """A row dict (or a compare cell: pass the metric's name, the cell lacks it)."""
        return cls(name=name or d.get("name") or d.get("metric") or "", group=d.get("group"),
                   metric=d.get("metric"), n=d.get("n"),
                   higher_is_better=d.get("higher_is_better"), version=d.get("version"),
                   **{s: Stat.of(d.get(s)) for s in SIDES})

    @property
    def rate(self) -> bool:
        return is_rate({"name": self.name, "metric": self.metric})

    @property
    def loss(self) -> bool:
        return is_loss({"name": self.name, "metric": self.metric})

    def text(self, side: str) -> str:
        stat = getattr(self, side)
        if side == "gain":
            return gain_text(stat, self.rate, relative=self.loss)
        return value_text(stat, self.rate)

    def display(self) -> dict[str, str]:
        return {s: self.text(s) for s in SIDES}


def is_loss(row: dict) -> bool:
    return row.get("metric") == "loss" or (row.get("name") or "").endswith("/loss")


def is_rate(row: dict) -> bool:
    """A rate in [0, 1] shown in percent (pass rates, accuracies, a win rate); a loss and
    lm-eval's unbounded metrics (NOT_RATES) are not."""
    return not is_loss(row) and row.get("metric") not in NOT_RATES


def _num(x, rate: bool) -> str:
    if x is None:
        return NONE
    return f"{100 * x:.1f}" if rate else f"{x:.4f}"


def value_text(stat: Stat | dict | None, rate: bool) -> str:
    """"55.0 [45.0, 65.0]" (a rate, in percent) or "1.2345 [1.2000, 1.2700]"; the value alone
    without an interval; "—" without a value."""
    s = Stat.of(stat)
    if s is None or s.value is None:
        return NONE
    inner = f" [{_num(s.ci[0], rate)}, {_num(s.ci[1], rate)}]" if s.ci else ""
    return f"{_num(s.value, rate)}{inner}"


def gain_text(stat: Stat | dict | None, rate: bool, relative: bool | None = None) -> str:
    """The gain in points of a rate ("+4.0 [-1.0, +9.0] pts"); for a loss (relative: its gain
    is a share of the base's loss) in % removed ("+12.5 [+3.1, +20.0] %"); for any other number
    in its own units ("+1.2500 [+0.2000, +2.3000]"). `relative` defaults to "not a rate"."""
    s = Stat.of(stat)
    if s is None or s.value is None:
        return NONE
    relative = not rate if relative is None else relative
    if not rate and not relative:
        inner = f" [{s.ci[0]:+.4f}, {s.ci[1]:+.4f}]" if s.ci else ""
        return f"{s.value:+.4f}{inner}"
    inner = f" [{100 * s.ci[0]:+.1f}, {100 * s.ci[1]:+.1f}]" if s.ci else ""
    return f"{100 * s.value:+.1f}{inner}{' pts' if rate else ' %'}"
