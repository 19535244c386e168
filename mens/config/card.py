"""An objective's card: the torch-free facts of a training objective that validation, planning
and data selection read instead of testing its name. Each objective's card is declared once, in
its module of mens.config.cards (beside its lane section's dataclass and valid values).

A lane is a method (lora | qlora | full: how the weights train) × an objective (what they train
toward). The training side of an objective (batch → loss) is the card's `train`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

# how the weights train (lane.method); the objective is the card
METHODS = ("lora", "qlora", "full")
# record kinds the data stage reads (mens.data.formats): chat (SFT messages), pairs
# (prompt/chosen/rejected), labeled (prompt/completion/label: KTO), prompts (prompt only: GRPO)
RECORDS = ("chat", "pairs", "labeled", "prompts")
# oracle batches judged at once during a grpo step, each in its own child process
# (mens.objective.rewards); the planner counts their host memory (mens.plan.memory.sampling)
ORACLE_WORKERS = 2


@dataclass(frozen=True)
class StepCost:
    """What one record costs in a training step, counted from the objective's code (`where`):
    the planner times each part (mens.plan.speed.objective_cost) instead of costing every
    objective as SFT's one row."""
    grad: tuple[int, ...]        # rows per record in each forward + backward pass of the step
    forward: int = 0             # rows per record scored without grad inside the step
    reference: int = 0           # rows per record the reference scores once, before training
    samples: int = 0             # completions per record sampled in the step, token by token
    oracle: bool = False         # the step waits for the oracle's verdicts on its samples
    where: str = ""              # the code that runs them (said in the plan)
    forward_what: str = "forward"   # what the no-grad rows are (kto: KL rows; grpo: reference)

    def words(self, tokens: int = 0) -> str:
        """One line: 'per record 2 policy rows + 2 reference forwards (once, before training)'."""
        def n(k, what):
            return f"{k} {what}{'s' if k != 1 else ''}"
        rows = sum(self.grad)
        passes = f" in {len(self.grad)} passes: {' + '.join(map(str, self.grad))}" \
            if len(self.grad) > 1 else ""
        parts = [n(rows, "policy row") + f" (forward + backward{passes})"]
        if self.samples:
            parts.insert(0, n(self.samples, "sampled completion") +
                         (f" of {tokens} tokens" if tokens else "") + " decoded token by token")
        if self.forward:
            parts.append(n(self.forward, self.forward_what) + " without grad in the step")
        if self.reference:
            parts.append(n(self.reference, "reference forward") + " (once, before training)")
        if self.oracle:
            parts.append("the oracle's verdicts")
        return " + ".join(parts)


@dataclass(frozen=True)
class Card:
    name: str
    record: str                      # the record kind one training example is (RECORDS)
    accepts: tuple[str, ...]         # record kinds the data stage may convert from (besides record)
    rows: Callable[[object], int]    # lane → rows one record puts in a micro-batch
    reference: str                   # none | always | when_beta (grpo: only when grpo.beta > 0)
    reference_in_step: bool          # True: the reference is scored inside the step (grpo);
    #                                  False: precomputed once before training (dpo)
    memory_terms: tuple[str, ...]    # what the planner models for it (mens.plan.memory): rows
    #                                  and passes, and the components named as they are there
    # (rows per record: rows_per_record, reference: needs_reference) → what a record costs in
    # time (mens.plan.speed); rows is the group size G for grpo
    cost: Callable[[int, bool], StepCost] = lambda rows, ref: StepCost((rows,))
    # the training side: "module:Class" of its mens.objective.base.Objective subclass, imported
    # by mens.objective.build only (it pulls torch; config, data and plan import none)
    train: str = ""
    config: type | None = None       # its lane section's dataclass (lane.<name>); None: no knobs
    ranges: dict = field(default_factory=dict)    # the section's numbers → Range (validate)
    choices: dict = field(default_factory=dict)   # the section's strings → their values
    # more checks of the composed config when this objective is the lane's (distill's teacher)
    check: Callable | None = None

    @property
    def packs(self) -> bool:
        """Records packed into rows (train.packing): SFT's; every other objective's batch keeps
        one record (pair, labeled answer, prompt's group) per row."""
        return self.record == "chat"

    def record_kinds(self) -> tuple[str, ...]:
        """The record kinds the data stage may hand this objective (its own first)."""
        return (self.record, *self.accepts)

    def step_cost(self, rows: int, reference: bool) -> StepCost:
        return self.cost(int(rows), bool(reference))

    def rows_per_record(self, lane) -> int:
        return int(self.rows(lane))

    def needs_reference(self, lane) -> bool:
        """A frozen reference model's log-probs: dpo, kto; grpo when its beta > 0."""
        if self.reference == "when_beta":
            return float(section(lane, self.name).beta) > 0
        return self.reference == "always"

    def lr_key(self, lane) -> str:
        """The rung's field an `auto` lr resolves to: the method decides (full trains every
        weight); an objective's own lr is in its option file (conf/lane/dpo.yaml: 5e-6)."""
        return "full_lr" if read(lane, "method") == "full" else "lora_lr"

    def label(self, lane) -> str:
        """The lane's name in summaries, telemetry and memory cells: the method for SFT (as
        before objectives existed), method-objective otherwise (lora-dpo, full-kto)."""
        method = read(lane, "method")
        return method if self.name == "sft" else f"{method}-{self.name}"


def read(node, key: str):
    """A key of a lane: a config node or a saved spec's plain dict."""
    return node.get(key) if isinstance(node, dict) else getattr(node, key)


def section(lane, name: str):
    """The lane's section of an objective (lane.dpo, lane.grpo …)."""
    return read(lane, name)
