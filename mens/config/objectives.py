"""Each training objective's torch-free facts (its card): what validation, planning and data
selection ask instead of testing the objective's name.

A lane is a method (lora | qlora | full: how the weights train) × an objective (what they train
toward). The training side of an objective (batch → loss) is mens.objective.<name>; this card is
what the stages that import no torch need to know of it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from omegaconf import OmegaConf

from mens.config.schema import METHODS, OBJECTIVES
from mens.errors import ConfigError

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
        return "full_lr" if _get(lane, "method") == "full" else "lora_lr"

    def label(self, lane) -> str:
        """The lane's name in summaries, telemetry and memory cells: the method for SFT (as
        before objectives existed), method-objective otherwise (lora-dpo, full-kto)."""
        method = _get(lane, "method")
        return method if self.name == "sft" else f"{method}-{self.name}"


def _get(node, key: str):
    return node.get(key) if isinstance(node, dict) else getattr(node, key)


def section(lane, name: str):
    """The lane's section of an objective (lane.dpo, lane.grpo …)."""
    return _get(lane, name)


CARDS = {
    "sft": Card("sft", "chat", (), lambda lane: 1, "none", False, (),
                lambda g, ref: StepCost((1,), where="mens/objective/sft.py: one packed row")),
    # chosen and rejected of each pair in one micro-batch: twice the rows
    "dpo": Card("dpo", "pairs", (), lambda lane: 2, "always", False,
                ("pair_rows", "reference_pass"),
                lambda g, ref: StepCost((2,), reference=2 if ref else 0, where=(
                    "mens/objective/dpo.py: Dpo.step scores chosen + rejected rows; "
                    "Dpo.prepare scores both with the reference once (reference_logps)"))),
    # ORPO's NLL (TRL's: prompt + answer) runs the chosen rows a second time: three rows
    "orpo": Card("orpo", "pairs", (), lambda lane: 3, "none", False, ("pair_rows",),
                 lambda g, ref: StepCost((2, 1), where=(
                     "mens/objective/orpo.py: Orpo.step scores chosen + rejected rows, then the "
                     "chosen rows again for the NLL (prompt_and_answer); no reference"))),
    "simpo": Card("simpo", "pairs", (), lambda lane: 2, "none", False, ("pair_rows",),
                  lambda g, ref: StepCost((2,), where=(
                      "mens/objective/simpo.py: Simpo.step scores chosen + rejected rows; "
                      "no reference"))),
    # unpaired: a pair becomes a desirable and an undesirable record (mens.data.formats.unpair)
    # the reference (both rows: the completion and its KL row) precomputed, as dpo's
    "kto": Card("kto", "labeled", ("pairs",), lambda lane: 1, "always", False,
                ("reference_pass",),
                lambda g, ref: StepCost((1,), forward=1, reference=2 if ref else 0,
                                        forward_what="KL-row forward", where=(
                    "mens/objective/kto.py: Kto.step scores the completion row, and its KL row "
                    "under no_grad; Kto.prepare scores both with the reference once"))),
    "grpo": Card("grpo", "prompts", ("chat", "pairs"),
                 lambda lane: int(section(lane, "grpo").num_generations), "when_beta", True,
                 ("group_rows", "generation", "reference_logits", "reference_copy", "server",
                  "oracle_procs"),   # each by formula in mens.plan.rl (plan.json: sampling)
                 lambda g, ref: StepCost((g,), forward=g if ref else 0, samples=g, oracle=True,
                                         forward_what="reference forward", where=(
                     "mens/objective/grpo.py: Grpo.step samples G completions (HF generate), "
                     "waits for the oracle, scores the G rows (completion_logps) and, when "
                     "grpo.beta > 0, the reference's log-probs of them (no grad)"))),
    # the student samples one answer per prompt (on lmbda's share of steps; planned as every
    # step), a local teacher scores the rows (no grad): its weights and its forward's logits
    # are the planner's `teacher` term (mens.plan.memory.distill_teacher)
    "distill": Card("distill", "prompts", ("chat", "pairs"), lambda lane: 1, "none", False,
                    ("generation", "teacher"),
                    lambda g, ref: StepCost((1,), forward=1, samples=1,
                                            forward_what="teacher forward", where=(
                        "mens/objective/distill.py: Distill.step samples one completion per "
                        "prompt (HF generate), scores the rows with the teacher (no grad) and "
                        "the student, and takes the generalised JSD of their logits"))),
}
if tuple(CARDS) != OBJECTIVES:   # mens's own registry, checked at import (`python -O` too)
    raise RuntimeError(f"mens.config.objectives.CARDS ({', '.join(CARDS)}) and "
                       f"mens.config.schema.OBJECTIVES ({', '.join(OBJECTIVES)}) disagree: every "
                       f"objective needs one card, in the same order.")


def card(lane_or_name) -> Card:
    """The card of a lane's objective (a lane node, or the objective's name)."""
    name = lane_or_name if isinstance(lane_or_name, str) else \
        (_get(lane_or_name, "objective") or "sft")
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


def for_data(data_kind: str) -> str:
    """The objective a data kind trains first (the hint of a mismatch error)."""
    have = RECORD_OF.get(data_kind, "chat")
    return next(n for n, c in CARDS.items() if c.record == have)


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
    method, objective = _get(lane, "method"), (_get(lane, "objective") if
                                               not isinstance(lane, dict) else
                                               lane.get("objective")) or "sft"
    c = card(objective)
    return {"lane": c.label({"method": method}), "method": method, "objective": objective}
