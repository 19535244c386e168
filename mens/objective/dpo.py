"""DPO (Rafailov et al. 2023): chosen/rejected pairs against a reference's log-probs.

The reference is the initial policy — the base with the adapter disabled (LoRA's B starts at 0),
the frozen SFT policy from `train.init_adapter`, or on lane.method=full the initial weights — so
its log-probs are computed once, before training (`prepare`), and only for the pairs the planned
steps reach: a pair no step reaches gets NaN, not a guess, and a step that meets one stops.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from mens.config.cards.dpo import LOSSES as DPO_LOSSES   # declared once, with lane.dpo
from mens.data.pack import IGNORE, pad_batch
from mens.errors import ConfigError, RunFailed
from mens.objective.base import Objective, Step


def dpo_losses(chosen_logratio: torch.Tensor, rejected_logratio: torch.Tensor, beta: float,
               loss_type: str = "sigmoid") -> torch.Tensor:
    """Per-pair DPO losses, TRL's DPOTrainer `loss_type`s. The log-ratios are
    log π(y|x) − log π_ref(y|x) of the chosen and the rejected answer; h = chosen − rejected.

        sigmoid  −log σ(β·h)          (Rafailov et al. 2023)
        hinge    relu(1 − β·h)        (SLiC; β·h is the reward margin)
        ipo      (h − 1/(2β))²        (Azar et al. 2023)

    For ipo the caller passes log-probs averaged over each answer's tokens, as TRL does (the
    others take sums). lane.dpo.loss is checked against DPO_LOSSES when the config composes."""
    margin = beta * chosen_logratio - beta * rejected_logratio   # β·h (the sigmoid path's order)
    if loss_type == "sigmoid":
        return -F.logsigmoid(margin)
    if loss_type == "hinge":
        return torch.relu(1 - margin)
    if loss_type == "ipo":
        return (chosen_logratio - rejected_logratio - 1 / (2 * beta)) ** 2
    raise ConfigError(f"`lane.dpo.loss={loss_type}` is not valid: it takes one of "
                      f"{', '.join(DPO_LOSSES)}.", key="lane.dpo.loss")


def pair_batch(pairs, seq_len: int) -> dict:
    """[(chosen Example, rejected Example, pair index)] → chosen rows then rejected rows."""
    exs = [p[0] for p in pairs] + [p[1] for p in pairs]
    batch = pad_batch(exs, min(seq_len, max(len(e) for e in exs)))
    batch["pair_index"] = torch.tensor([p[2] for p in pairs])
    return batch


def answer_tokens(batch: dict) -> torch.Tensor:
    """(B,) supervised tokens of each row (labels shifted by one, as the log-probs are)."""
    return (batch["labels"][:, 1:] != IGNORE).sum(-1).clamp(min=1)


class Dpo(Objective):
    name = "dpo"

    def __init__(self, spec, ref_logps: torch.Tensor | None = None):
        super().__init__(spec)
        self.ref_logps = ref_logps           # (n_pairs, 2): chosen, rejected; NaN: not reached
        self.scored = 0                      # pairs the reference pass scored (said)

    def prepare(self, score, items: list, reached: set | None) -> None:
        self.ref_logps = reference_logps(score, items, self.spec.train.micro_batch,
                                         self.spec.train.seq_len, reached)
        self.scored = int((~self.ref_logps[:, 0].isnan()).sum())
        if self.scored < len(items):
            print(f"mens: dpo reference pass: {self.scored} of {len(items)} pairs (the ones the "
                  f"planned steps reach; the others are never trained on)", file=sys.stderr)

    def step(self, ctx: Step, batch: dict):
        idx = batch.pop("pair_index")
        keep = batch.pop("keep", None)        # False: a rank's repeated pair (strategy.Repeat)
        n = len(idx)
        loss_type, beta = self.lane.dpo.loss, self.lane.dpo.beta
        logps = ctx.logps(batch)                                                  # (2n,)
        ref = self.ref_logps.to(logps.device)[idx]                                # (n, 2)
        if torch.isnan(ref).any():
            raise RunFailed(f"pairs {idx[torch.isnan(ref).any(-1).cpu()].tolist()} have no "
                            f"reference log-probs: the reference pass scored only the pairs the "
                            f"plan's steps reach, and this step went past them.")
        policy_chosen, policy_rejected = logps[:n], logps[n:]
        ref_chosen, ref_rejected = ref[:, 0], ref[:, 1]
        if loss_type == "ipo":   # TRL: IPO compares log-probs averaged over completion tokens
            tokens = answer_tokens(batch).to(logps.dtype)
            policy_chosen, ref_chosen = policy_chosen / tokens[:n], ref_chosen / tokens[:n]
            policy_rejected, ref_rejected = policy_rejected / tokens[n:], ref_rejected / tokens[n:]
        chosen = policy_chosen - ref_chosen          # log-ratios; rewards are beta times these
        rejected = policy_rejected - ref_rejected
        margin = beta * chosen - beta * rejected
        losses = dpo_losses(chosen, rejected, beta, loss_type)                    # (n,)
        if ctx.world > 1:   # means over every rank's pairs (repeats weigh 0), as in one process
            k = torch.ones_like(margin) if keep is None else keep.to(margin)
            pairs = ctx.all_sum(k.sum())
            stats = ctx.all_sum(torch.stack([(beta * chosen * k).sum(),
                                             (beta * rejected * k).sum(), (margin * k).sum(),
                                             ((margin > 0).to(k) * k).sum()]).detach()) / pairs
            loss = (losses * k).sum() / (pairs / ctx.world)
            logged = ctx.all_sum(loss.detach()) / ctx.world
            return loss, self.over_step(ctx, {"loss": logged, **dict(zip(
                ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"),
                stats))})
        loss = losses.mean()
        return loss, self.over_step(ctx, {
            "loss": loss.detach(), "rewards/chosen": (beta * chosen).mean().detach(),
            "rewards/rejected": (beta * rejected).mean().detach(),
            "rewards/margins": margin.mean().detach(),
            "rewards/accuracies": (margin > 0).float().mean().detach()})


def reference_logps(score, pairs: list, micro: int, seq_len: int,
                    reached: set | None = None) -> torch.Tensor:
    """The initial policy's log-probs of the pairs: (n_pairs, 2), chosen and rejected. Only
    the pairs whose index is in `reached` are scored (None: every pair); the rest are NaN.
    score(batch) → (2n,) log-probs without grad."""
    from tqdm.auto import tqdm

    out = torch.full((len(pairs), 2), float("nan"))
    todo = [p for p in pairs if reached is None or p[2] in reached]
    for i in tqdm(range(0, len(todo), micro), desc="dpo reference pass", unit="batch",
                  leave=False):
        chunk = todo[i:i + micro]
        batch = pair_batch(chunk, seq_len)
        idx = batch.pop("pair_index")
        lp = score(batch).float()
        out[idx, 0], out[idx, 1] = lp[:len(chunk)], lp[len(chunk):]
    return out
