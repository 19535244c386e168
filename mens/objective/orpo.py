"""ORPO's loss (Hong et al. 2024, arXiv 2403.07691) as TRL computes it: no reference model; the
NLL of the chosen answer plus β times an odds-ratio term on length-averaged log-probs.

Checked against TRL 1.16 `trl.experimental.orpo.ORPOTrainer.odds_ratio_loss` and
`.get_batch_loss_metrics` (tests/objective/test_trl_losses.py)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 − exp(x)) for x < 0, stable at both ends: log1p(−eˣ) far below 0, log(−expm1(x))
    near 0, branching at −ln 2 where the two lose the least (Mächler 2012; TRL branches the same)."""
    return torch.where(x < -0.6931471805599453, torch.log1p(-torch.exp(x)),
                       torch.log(-torch.expm1(x)))


def orpo_losses(chosen_logps_mean: torch.Tensor, rejected_logps_mean: torch.Tensor,
                chosen_nll: torch.Tensor,
                beta: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The ORPO loss of a batch of pairs and TRL's logged metrics.

    chosen_logps_mean, rejected_logps_mean: (B,) log-probs of each answer's completion tokens,
        AVERAGED over those tokens (TRL: get_batch_logps(average_log_prob=True)).
    chosen_nll: () the chosen rows' causal-LM cross-entropy, one mean over every real token of
        every chosen row. NB TRL's ORPO NLL covers the PROMPT tokens as well as the answer (its
        labels are the input ids wherever attention_mask is 1, shifted), unlike its log-probs,
        which cover the completion only; token-weighted across the batch, not a mean of rows.
    beta: λ in the paper (TRL's ORPOConfig.beta, default 0.1).

    loss = nll − mean_i β·log σ(log odds_i),  log odds = log(p_c/(1−p_c)) − log(p_r/(1−p_r))
    with p = exp(mean log-prob). Metrics: per-pair (B,) tensors where TRL logs a mean over
    pairs (their .mean() is TRL's number), 0-d where TRL's quantity is batch-level; all detached."""
    chosen, rejected = chosen_logps_mean.float(), rejected_logps_mean.float()       # (B,)
    log_odds = (chosen - rejected) - (log1mexp(chosen) - log1mexp(rejected))         # (B,)
    ratio = F.logsigmoid(log_odds)                                                   # (B,)
    loss = chosen_nll - (beta * ratio).mean()
    reward_c, reward_r = beta * chosen.detach(), beta * rejected.detach()            # (B,)
    metrics = {"rewards/chosen": reward_c, "rewards/rejected": reward_r,
               "rewards/accuracies": (reward_c > reward_r).float(),
               "rewards/margins": reward_c - reward_r,
               "logps/chosen": chosen.detach(), "logps/rejected": rejected.detach(),
               "nll_loss": chosen_nll.detach(),
               "log_odds_ratio": ratio.detach(), "log_odds_chosen": log_odds.detach()}
    return loss, metrics
