"""ORPO's loss (Hong et al. 2024, arXiv 2403.07691) as TRL computes it: no reference model; the
NLL of the chosen answer plus β times an odds-ratio term on length-averaged log-probs.

Checked against TRL 1.16 `trl.experimental.orpo.ORPOTrainer.odds_ratio_loss` and
`.get_batch_loss_metrics` (tests/objective/test_trl_losses.py). `Orpo` trains it on pairs
(mens.objective.dpo.pair_batch: chosen rows, then rejected rows)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from mens.data.pack import IGNORE
from mens.objective.base import Objective, Step
from mens.objective.preference import across_ranks, kept, mean_logps, reduce_metrics, safe


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


def prompt_and_answer(batch: dict, n: int, keep: torch.Tensor) -> dict:
    """The chosen rows with every real token a label, prompt included: TRL's ORPO NLL (its
    labels are the input ids wherever attention_mask is 1; the loss shifts them by one)."""
    ids, mask = batch["input_ids"][:n], batch["attention_mask"][:n]                 # (n, S)
    labels = ids.masked_fill(mask == 0, IGNORE)
    labels[~keep.to(labels.device)] = IGNORE          # a rank's repeat: no token
    return {"input_ids": ids, "attention_mask": mask, "position_ids": batch["position_ids"][:n],
            "labels": labels}


class Orpo(Objective):
    """ORPO on pairs. The NLL is TRL's (prompt + answer of the chosen rows, one token mean),
    which the answer-only log-probs cannot give: the chosen rows run through the model twice
    (answer labels, then every token), so a micro-batch holds 3 rows' activations per pair
    (its card's rows)."""
    name = "orpo"
    KEYS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
            "logps/chosen", "logps/rejected", "nll_loss", "log_odds_ratio", "log_odds_chosen")

    def step(self, ctx: Step, batch: dict):
        batch.pop("pair_index")
        n = batch["input_ids"].shape[0] // 2
        keep = kept(batch, n, batch["input_ids"].device)                            # (n,)
        means = mean_logps(ctx.logps(batch), batch)                                   # (2n,)
        full = prompt_and_answer(batch, n, keep)
        tokens = (full["labels"][:, 1:] != IGNORE).sum()
        nll_sum = -ctx.logps(full).sum()             # summed over every chosen token
        if ctx.world > 1:   # one token mean over every rank's chosen rows, as in one process
            nll = nll_sum / (ctx.all_sum(tokens.float()) / ctx.world)
        else:
            nll = nll_sum / tokens.clamp(min=1)
        chosen, rejected = safe(means[:n], keep), safe(means[n:], keep)
        if keep.any():
            loss, metrics = orpo_losses(chosen[keep], rejected[keep], nll, self.lane.orpo.beta)
        else:               # every pair a repeat (the last batch of a rank): the NLL's 0 only
            loss, metrics = nll + 0 * means.sum(), {"nll_loss": nll.detach()}
        if ctx.world > 1:   # the odds-ratio term is this rank's pair mean; the NLL is global
            loss = nll + across_ranks(ctx, loss - nll, keep.sum())
        logged = reduce_metrics(ctx, {**metrics, "loss": loss.detach()}, (*self.KEYS, "loss"))
        return loss, self.over_step(ctx, logged)
