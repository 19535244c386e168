"""KTO's loss (Ethayarajh et al. 2024, arXiv 2402.01306) as TRL computes it: unpaired records,
each a (prompt, completion) labelled desirable or not, scored against a reference model and a
KL baseline z₀ estimated from mismatched pairs.

Checked against TRL 1.16 `trl.KTOTrainer._compute_loss` (trl/trainer/kto_trainer.py, loss_type
"kto"; TRL has no separate loss method, so the test runs the trainer's compute_loss on a real
tiny model — tests/objective/test_trl_losses.py). `Kto` trains it on labeled records."""
from __future__ import annotations

import sys

import torch

from mens.errors import RunFailed
from mens.objective.base import Objective, Step
from mens.objective.preference import across_ranks, kept, reduce_metrics


def kto_kl(policy_kl_logps: torch.Tensor, reference_kl_logps: torch.Tensor) -> torch.Tensor:
    """() this rank's KL estimate: the mean over the batch of log π(y'|x) − log π_ref(y'|x) on
    mismatched pairs (TRL rotates completions by one within each batch: x_i with y_{i−1}),
    summed log-probs of the completion tokens. Detached: z₀ is a baseline, not a target (TRL
    computes it under no_grad). Several ranks: ranks_kl averages this over them; kto_losses
    clamps it at 0 as TRL does after its gather."""
    return (policy_kl_logps - reference_kl_logps).mean().detach()


def ranks_kl(ctx, policy_kl_logps: torch.Tensor, reference_kl_logps: torch.Tensor,
             keep: torch.Tensor) -> torch.Tensor:
    """() z₀ over every rank, as TRL takes it: each rank's mean over its own batch (kto_kl), then
    the plain mean of those over the ranks — `accelerator.gather_for_metrics(kl).mean()` in
    KTOTrainer._compute_loss — not one mean over all ranks' examples pooled, which differs when
    the ranks hold different numbers of records. A rank's repeats (keep False: strategy.Repeat)
    are not its records; a rank holding none real has no mean and is left out of the average.
    Unclamped (kto_losses clamps at 0). One process: kto_kl of its real records."""
    if ctx.world == 1:
        return kto_kl(policy_kl_logps[keep], reference_kl_logps[keep])
    real = bool(keep.any())
    mine = kto_kl(policy_kl_logps[keep].float(), reference_kl_logps[keep].float()) if real \
        else policy_kl_logps.new_zeros((), dtype=torch.float32)
    s = ctx.all_sum(torch.stack([mine, mine.new_tensor(float(real))]))   # (Σ rank means, ranks)
    return s[0] / s[1].clamp(min=1)


def kto_losses(policy_logps: torch.Tensor, reference_logps: torch.Tensor, labels: torch.Tensor,
               kl: torch.Tensor, beta: float, desirable_weight: float = 1.0,
               undesirable_weight: float = 1.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The KTO loss of a batch of unpaired records and TRL's logged metrics.

    policy_logps, reference_logps: (B,) SUMMED log-probs of each completion's tokens (TRL sums).
    labels: (B,) bool, True = desirable. kl: () z₀ from kto_kl (all ranks' mean), clamped at 0.
    desirable:   w_d · (1 − σ(β·(log-ratio − z₀)))
    undesirable: w_u · (1 − σ(β·(z₀ − log-ratio)))
    loss = the mean over all B records (TRL's nanmean over chosen ++ rejected).
    Metrics (detached): rewards/chosen (n_desirable,) and rewards/rejected (n_undesirable,) per
    record, logps/* likewise — their .mean() is TRL's number; rewards/margins and kl are 0-d
    (margins only when both kinds are present, as TRL logs it)."""
    labels = labels.to(torch.bool)
    kl = kl.detach().clamp(min=0)
    logratio = policy_logps - reference_logps                                         # (B,)
    desirable = 1 - torch.sigmoid(beta * (logratio - kl))                             # (B,)
    undesirable = 1 - torch.sigmoid(beta * (kl - logratio))                           # (B,)
    losses = torch.where(labels, desirable_weight * desirable, undesirable_weight * undesirable)
    loss = losses.nanmean()
    rewards = beta * logratio.detach()                                                # (B,)
    metrics = {"rewards/chosen": rewards[labels], "rewards/rejected": rewards[~labels],
               "logps/chosen": policy_logps.detach()[labels],
               "logps/rejected": policy_logps.detach()[~labels], "kl": kl}
    if labels.any() and (~labels).any():
        metrics["rewards/margins"] = rewards[labels].mean() - rewards[~labels].mean()
    return loss, metrics


class Kto(Objective):
    """KTO on labeled records. An item is (completion, KL completion, index, label): the KL row
    is the record's prompt with another record's completion (mens.data.examples.mismatched, TRL's
    rotation); the loader batches items as pairs (mens.objective.dpo.pair_batch: completion
    rows, then KL rows). The reference is the initial policy (the adapter's base, the frozen
    SFT adapter, or the initial weights on method full): its log-probs of both rows are computed
    once before training, over the records the planned steps reach, as DPO's are. The policy's
    KL log-probs are scored inside the step without grad (TRL: under no_grad, in train mode)."""
    name = "kto"
    KEYS = ("rewards/chosen", "rewards/rejected", "logps/chosen", "logps/rejected", "kl", "loss")

    def __init__(self, spec, ref_logps: torch.Tensor | None = None,
                 desirable: torch.Tensor | None = None):
        super().__init__(spec)
        self.ref_logps = ref_logps           # (n_records, 2): completion, KL; NaN: not reached
        self.desirable = desirable           # (n_records,) bool: each record's label
        self.scored = 0

    @property
    def pairs(self) -> bool:
        """Items are batched as pairs are (two rows each), though each is one record."""
        return True

    def prepare(self, score, items: list, reached: set | None) -> None:
        from mens.objective.dpo import reference_logps

        self.desirable = torch.zeros(len(items), dtype=torch.bool)
        for it in items:
            self.desirable[it[2]] = bool(it[3])
        self.ref_logps = reference_logps(score, items, self.spec.train.micro_batch,
                                         self.spec.train.seq_len, reached)
        self.scored = int((~self.ref_logps[:, 0].isnan()).sum())
        if self.scored < len(items):
            print(f"mens: kto reference pass: {self.scored} of {len(items)} records (the ones "
                  f"the planned steps reach; the others are never trained on)", file=sys.stderr)

    def step(self, ctx: Step, batch: dict):
        idx = batch.pop("pair_index")
        n = len(idx)
        keep = kept(batch, n, batch["input_ids"].device)                            # (n,)
        rows = {k: v[:n] for k, v in batch.items()}        # (n, S) each: the completions
        kl_rows = {k: v[n:] for k, v in batch.items()}     # (n, S) each: mismatched pairs
        logps = ctx.logps(rows)                                                       # (n,)
        with torch.no_grad():                # z₀ is a baseline: no gradient (TRL's no_grad)
            kl_logps = ctx.logps(kl_rows)                                             # (n,)
        ref = self.ref_logps.to(logps.device)[idx]                                    # (n, 2)
        if torch.isnan(ref).any():
            raise RunFailed(f"records {idx[torch.isnan(ref).any(-1).cpu()].tolist()} have no "
                            f"reference log-probs: the reference pass scored only the records "
                            f"the plan's steps reach, and this step went past them.")
        labels = self.desirable.to(logps.device)[idx]                                 # (n,)
        kl = ranks_kl(ctx, kl_logps, ref[:, 1], keep)
        c = self.lane.kto
        if keep.any():
            loss, metrics = kto_losses(logps[keep], ref[keep, 0], labels[keep], kl, c.beta,
                                       c.desirable_weight, c.undesirable_weight)
        else:                # every record a repeat (the last batch of a rank)
            loss, metrics = 0 * logps.sum(), {"kl": kl.clamp(min=0)}
        loss = across_ranks(ctx, loss, keep.sum())
        logged = reduce_metrics(ctx, {**metrics, "loss": loss.detach()}, self.KEYS)
        if "rewards/chosen" in logged and "rewards/rejected" in logged:   # as TRL logs it
            logged["rewards/margins"] = logged["rewards/chosen"] - logged["rewards/rejected"]
        return loss, self.over_step(ctx, logged)
