"""The Objective interface: what the LightningModule (mens.train.module.MensModule) calls.

The module owns the model, the optimizer and the ways log-probs are computed (the chunked head,
or full logits: train.loss); an objective owns what is done with them — its batch's shape (rows
or pairs), its loss, its metrics, and a reference pass if it needs one. mens.objective imports
no mens.train: what the step needs from the module comes in a `Step`.

To add an objective: its card module in mens.config.cards (its lane section's dataclass, that
section's valid values, its card naming the training class here), registered in
mens.config.cards.NAMES; one module here with the subclass (its `name` the card's); its option
file conf/lane/NAME.yaml; its tests. mens.objective.build finds the class through the card.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from mens.config.objectives import card


@dataclass
class Step:
    """What one training step hands an objective (built by the module, per step).

    logps(batch) → (B,): each row's summed log-prob of its supervised tokens, with grad, by the
        module's path (train.loss: chunked head or full logits). Pops nothing from the batch.
    lm_loss(batch) → (loss to backward, the step's logged loss): the causal-LM loss, token-
        weighted over the accumulation group and every rank (MensModule.token_weighted_loss).
    world: processes; all_sum(t): t summed over them (a collective: every rank calls it).
    model: the policy (an objective that scores a reference inside the step disables its
        adapter or keeps its own frozen copy).
    group: the optimizer step this micro-batch belongs to, (epoch, accumulation group); the
        same for every micro-batch of one step. None: each micro-batch is a step of its own.
    accum: micro-batches per optimizer step (Lightning divides each one's loss by it)."""
    logps: Callable
    lm_loss: Callable
    world: int
    all_sum: Callable
    model: object = None
    group: object = None
    rank: int = 0                 # this process's index among `world`
    all_max: Callable = None      # t's element-wise max over ranks (a collective; None: t)
    accum: int = 1


class Objective:
    """One training objective. Subclasses set `name` and implement `step`; `prepare` runs once
    before training (a precomputed reference pass), `metrics` are logged beside the loss."""
    name = "sft"
    measures_held_out = False    # held_out() has a measure of its own (grpo)

    def __init__(self, spec):
        self.spec, self.lane = spec, spec.lane
        self.card = card(self.name)
        self.before = None       # held_out() on the initial weights (mens.train.run)
        self._window = (None, {})   # (step's group, {metric: (sum, micro-batches)}): over_step

    @property
    def pairs(self) -> bool:
        """The loader batches pair examples (chosen, rejected, index): chosen rows then rejected
        rows (mens.objective.dpo.pair_batch)."""
        return self.card.record == "pairs"

    @property
    def prompts(self) -> bool:
        """The loader batches chat examples for their prompts (record ids in `record_ids`):
        the objective samples its own answers (grpo)."""
        return self.card.record == "prompts"

    def bind(self, model, tokenizer, records: list, encoder=None) -> None:
        """Once the model is loaded, before training: what an objective that generates needs
        (the tokenizer, the run's encoder, the training records by id). Default: nothing."""

    def prepare(self, score: Callable, items: list, reached: set | None) -> None:
        """Before training, on the initial weights. score(batch) → (B,) log-probs without grad
        (the module's path, the model in eval mode); items: the training examples (pairs:
        (chosen, rejected, index)); reached: the indices the planned steps reach (None: all).
        Default: nothing."""

    def held_out(self, model, records: list) -> dict | None:
        """The objective's own held-out measure, run before and after training on the data's
        held-out records (chat records, capped by train.eval_max_records): grpo's greedy oracle
        pass rate. None (the default): the held-out loss alone says how training went."""
        return None

    def step(self, ctx: Step, batch: dict) -> tuple[object, dict]:
        """One micro-batch → (loss to backward, {metric name: detached scalar}). The metrics
        hold `loss`: the value logged as train/loss (under accumulation, the step's)."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        """What a checkpoint keeps of the objective (grpo: its sampling RNG). Called on every
        rank (MensModule.on_save_checkpoint): it may be a collective."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """A resumed run's objective state, as state_dict() saved it."""

    def over_step(self, ctx: Step, metrics: dict) -> dict:
        """This micro-batch's logged numbers (0-d tensors) → its optimizer step's so far: each
        the mean over the micro-batches of the accumulation window that logged it. Lightning
        backwards each micro-batch's loss / grad_accum, so that mean is the loss the step
        minimises (transformers' Trainer and TRL log the same), and what the step's row reads
        at the window's last micro-batch is the step's, not the last micro-batch's. For an
        objective whose loss is a mean per micro-batch (DPO, ORPO, SimPO, KTO); SFT's is
        token-weighted over the window by the module (Step.lm_loss)."""
        if ctx.group is None:
            return metrics
        if self._window[0] != ctx.group:             # a new window: a new optimizer step
            self._window = (ctx.group, {})
        sums = self._window[1]
        for k, v in metrics.items():
            total, n = sums.get(k, (0.0, 0))
            sums[k] = (total + float(v), n + 1)
        like = metrics["loss"]
        return {k: like.new_tensor(total / n) for k, (total, n) in sums.items()}
