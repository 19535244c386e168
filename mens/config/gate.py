"""After training, the judging stages: `eval` (benchmarks, in-domain pass@k, a judge, every
number with its interval), `gate` (pass or fail on those), `compare` and `ladder`, with their
valid values."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from mens.config.ranges import AUTO, Range, count, nonneg, pos


@dataclass
class EvalConfig:
    """`mens eval` (mens.eval): standard benchmarks (lm-evaluation-harness), in-domain oracle
    pass@k, an optional judge — every metric with a 95 % interval, base and tuned paired."""
    tasks: List[str] = field(default_factory=list)   # lm-eval tasks or groups by name
    include_path: Optional[str] = None   # a dir of the user's own lm-eval task YAMLs
    limit: Optional[float] = None    # lm-eval: items per task (int) or a fraction (< 1); null: all
    num_fewshot: Optional[int] = None   # null: each task's own default
    batch_size: Any = AUTO           # auto: the largest the eval plan fits; or an int
    chat_template: Any = AUTO        # auto: the model's chat template for generation tasks when it has one
    max_length: Optional[int] = None    # lm-eval's context window; null: min(the rung's, 4096)
    in_domain: bool = True           # the spoke's held-out prompts: oracle pass@1 / pass@k + loss
    collateral: bool = True          # every other spoke's held-out prompts: loss + greedy pass@1
    max_prompts: int = 64            # held-out prompts per spoke (all of them, capped here)
    k: int = 4                       # samples per prompt for pass@k (plus one greedy answer)
    temperature: float = 0.8         # of the k samples
    top_p: float = 0.95
    max_new_tokens: int = 256        # per answer
    judge: Optional[str] = None      # teacher: pairwise base-vs-tuned through the teacher cascade
    judge_prompts: int = 16          # held-out prompts the judge sees (each in both orders)
    confidence: float = 0.95         # of every interval
    bootstrap: int = 2000            # resamples of the items (paired between base and tuned)
    min_items: int = 20              # fewer items: a gain is "too few to judge" (never significant; the gate fails)
    seed: int = 0
    models: List[str] = field(default_factory=lambda: ["base", "tuned"])   # base | tuned (the adapter through PEFT)
    out: Optional[str] = None        # null: the run dir (or this command's own dir for a base)


@dataclass
class GateConfig:
    """`mens gate run=DIR` (mens.gate): reads `mens eval`'s results (running what is missing) and
    passes when the in-domain gain is significant and nothing else regresses with confidence."""
    metric: str = AUTO               # in-domain gain on: auto (pass@1 with an oracle, else loss) | pass@1 | pass@k | loss
    min_gain: float = 0.005          # the gain's interval must lie above this (a fraction: 0.5 points of a rate, 0.5 % of the loss)
    max_regression: float = 0.05     # a collateral metric confidently losing more than this fails
    guard_tasks: List[str] = field(default_factory=list)   # lm-eval tasks guarded for regression
    max_prompts: int = 64            # held-out prompts per spoke
    k: int = 4                       # samples per prompt (pass@k)
    max_new_tokens: int = 256        # per answer
    collateral: bool = True          # guard every other spoke too


@dataclass
class CompareConfig:
    runs: List[str] = field(default_factory=list)   # run dirs or globs (across-runs mode)
    out: Optional[str] = None        # null: the command's own run dir
    prompts: int = 8                 # before/after: the spoke's first N held-out prompts
    max_tokens: int = 48             # greedy tokens per answer (short: CPU-friendly)


@dataclass
class LadderConfig:
    """`mens ladder` (mens.ladder): the rung × spoke matrix and each cell's state."""
    runs: str = "outputs"            # where run dirs are looked for (spec.yaml + summary.json)


# Every number of these sections and its valid values (mens.config.validate): null is accepted
# wherever the field is Optional (its meaning is in the note); `[]`: every list item.
RANGES = {
    "gate.max_prompts": count("held-out prompts per spoke the gate asks and scores", "64"),
    "gate.max_new_tokens": count("tokens per gate answer", "256"),
    "gate.k": count("samples per prompt for pass@k", "4"),
    "gate.min_gain": Range(lo=-1, hi=1, example="0",
                           note="the least in-domain gain the interval must clear (a fraction: "
                                "points of pass rate, or the share of eval loss removed)"),
    "gate.max_regression": Range(lo=0, hi=1, example="0.05",
                                 note="the most a collateral metric may confidently lose (a "
                                      "fraction)"),
    "eval.max_prompts": count("held-out prompts per spoke", "64"),
    "eval.k": nonneg("samples per prompt for pass@k; 0: a greedy answer only", "4"),
    "eval.temperature": nonneg("the sampling temperature of the k samples", "0.8"),
    "eval.top_p": Range(lo=0, hi=1, lo_open=True, example="0.95", note="nucleus sampling's mass"),
    "eval.max_new_tokens": count("tokens per answer", "256"),
    "eval.judge_prompts": count("held-out prompts the judge compares (each in both orders)", "16"),
    "eval.confidence": Range(lo=0.5, hi=1, hi_open=True, example="0.95",
                             note="the coverage of every interval"),
    "eval.bootstrap": Range(lo=100, integer=True, example="2000",
                            note="bootstrap resamples of the items"),
    "eval.min_items": count("items below which a gain is too few to judge (the gate records a "
                            "lowered floor)", "20"),
    "eval.num_fewshot": Range(lo=0, integer=True, example="5", note="few-shot examples; null: "
                                                                     "each task's default"),
    "eval.limit": pos("items per task (an int) or a fraction below 1; null: all", "100"),
    "eval.max_length": count("lm-eval's context window in tokens", "2048"),
    "eval.seed": Range(lo=0, hi=2**32 - 1, integer=True, example="0", note="a uint32"),
    "compare.prompts": count("held-out prompts asked", "8"),
    "compare.max_tokens": count("greedy tokens per answer", "48"),
}
# The strings with a fixed set of values
CHOICES = {
    "gate.metric": [AUTO, "pass@1", "pass@k", "loss"],
    "eval.judge": ["teacher"],
    "eval.chat_template": [AUTO, True, False],
    "eval.models[]": ["base", "tuned"],
}
