"""SimPO's loss (Meng et al. 2024, arXiv 2405.14734) as TRL computes it: no reference model; the
reward of an answer is β times its length-averaged log-prob, with a target margin γ.

TRL 1.16 has no SimPO trainer of its own: it is `trl.experimental.cpo.CPOTrainer` with
`CPOConfig(loss_type="simpo", cpo_alpha=0.0)` (cpo_alpha > 0 adds CPO's NLL term: "CPO-SimPO").
Checked against `CPOTrainer.cpo_loss` and `.get_batch_loss_metrics` (tests/objective/
test_trl_losses.py). TRL's `simpo_gamma` is γ itself (default 0.5) and it subtracts γ/β; this
function takes γ/β (the SimPO authors' `gamma_beta_ratio`): simpo_gamma = gamma_beta_ratio · β."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from mens.objective.base import Objective, Step
from mens.objective.preference import across_ranks, kept, mean_logps, reduce_metrics, safe


def simpo_losses(chosen_logps_mean: torch.Tensor, rejected_logps_mean: torch.Tensor, beta: float,
                 gamma_beta_ratio: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The SimPO loss of a batch of pairs and TRL's logged metrics.

    chosen_logps_mean, rejected_logps_mean: (B,) log-probs of each answer's completion tokens
        averaged over those tokens (TRL: average_log_prob=True for loss_type simpo).
    loss = mean_i −log σ(β·(c_i − r_i − γ/β)).
    Metrics: per-pair (B,) tensors (their .mean() is TRL's logged number), detached."""
    h = chosen_logps_mean - rejected_logps_mean - gamma_beta_ratio                    # (B,)
    loss = (-F.logsigmoid(beta * h)).mean()
    reward_c = beta * chosen_logps_mean.detach()                                      # (B,)
    reward_r = beta * rejected_logps_mean.detach()
    metrics = {"rewards/chosen": reward_c, "rewards/rejected": reward_r,
               "rewards/accuracies": (reward_c > reward_r).float(),
               "rewards/margins": reward_c - reward_r,
               "logps/chosen": chosen_logps_mean.detach(),
               "logps/rejected": rejected_logps_mean.detach()}
    return loss, metrics


class Simpo(Objective):
    """SimPO on pairs (mens.objective.dpo.pair_batch: chosen rows, then rejected rows)."""
    name = "simpo"
    KEYS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
            "logps/chosen", "logps/rejected")

    def step(self, ctx: Step, batch: dict):
        batch.pop("pair_index")
        n = batch["input_ids"].shape[0] // 2
        keep = kept(batch, n, batch["input_ids"].device)                            # (n,)
        means = mean_logps(ctx.logps(batch), batch)                                   # (2n,)
        chosen, rejected = safe(means[:n], keep), safe(means[n:], keep)
        c = self.lane.simpo
        if keep.any():
            loss, metrics = simpo_losses(chosen[keep], rejected[keep], c.beta, c.gamma_beta_ratio)
        else:               # every pair a repeat (the last batch of a rank): nothing to learn
            loss, metrics = 0 * means.sum(), {}
        loss = across_ranks(ctx, loss, keep.sum())
        logged = reduce_metrics(ctx, {**metrics, "loss": loss.detach()}, (*self.KEYS, "loss"))
        return loss, self.over_step(ctx, logged)
