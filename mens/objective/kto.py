"""KTO's loss (Ethayarajh et al. 2024, arXiv 2402.01306) as TRL computes it: unpaired records,
each a (prompt, completion) labelled desirable or not, scored against a reference model and a
KL baseline z₀ estimated from mismatched pairs.

Checked against TRL 1.16 `trl.KTOTrainer._compute_loss` (trl/trainer/kto_trainer.py, loss_type
"kto"; TRL has no separate loss method, so the test runs the trainer's compute_loss on a real
tiny model — tests/objective/test_trl_losses.py)."""
from __future__ import annotations

import torch


def kto_kl(policy_kl_logps: torch.Tensor, reference_kl_logps: torch.Tensor) -> torch.Tensor:
    """() this rank's KL estimate: the mean over the batch of log π(y'|x) − log π_ref(y'|x) on
    mismatched pairs (TRL rotates completions by one within each batch: x_i with y_{i−1}),
    summed log-probs of the completion tokens. Detached: z₀ is a baseline, not a target (TRL
    computes it under no_grad). Several ranks: average this across them, then pass it to
    kto_losses, which clamps it at 0 as TRL does after its gather."""
    return (policy_kl_logps - reference_kl_logps).mean().detach()


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
