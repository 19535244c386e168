"""What the reference-free preference objectives (ORPO, SimPO) and KTO share: a pair batch
split into its halves, length-averaged log-probs, and means over every rank's examples.

A rank's repeated example (strategy.Repeat: the last batch padded so every rank steps) has no
label left and weighs 0: `keep` says which rows are real. Several processes: a loss that is a
mean over examples is scaled so that DDP's gradient average gives the mean over all ranks'
real examples, as one process would (mens.objective.dpo does the same)."""
from __future__ import annotations

import torch

from mens.objective.dpo import answer_tokens


def kept(batch: dict, n: int, device) -> torch.Tensor:
    """(n,) bool: the pairs (or records) of this batch that are real, not a rank's repeat."""
    keep = batch.pop("keep", None)
    return torch.ones(n, dtype=torch.bool, device=device) if keep is None else \
        keep.to(device=device, dtype=torch.bool)


def mean_logps(logps: torch.Tensor, batch: dict) -> torch.Tensor:
    """(B,) summed log-probs → averaged over each row's supervised tokens (TRL's
    average_log_prob=True: the completion tokens)."""
    return logps / answer_tokens(batch).to(logps.device, logps.dtype)


def safe(x: torch.Tensor, keep: torch.Tensor, value: float = -1.0) -> torch.Tensor:
    """x with a repeat's entry replaced by a finite log-prob: its answer has no token (mean 0,
    where ORPO's log(1 − eˣ) is −inf) and its loss is not used, but NaN would reach the grads."""
    return torch.where(keep, x, torch.full_like(x, value))


def across_ranks(ctx, loss: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """A loss that is this rank's mean over `count` real examples → the share that, averaged
    over ranks by DDP, is the mean over every rank's examples. One process: unchanged."""
    if ctx.world == 1:
        return loss
    total = ctx.all_sum(count.detach().float())
    return loss * count / (total / ctx.world)


def reduce_metrics(ctx, metrics: dict, keys: tuple[str, ...]) -> dict:
    """TRL's logged numbers: a per-example tensor → its mean over every rank's examples, a 0-d
    one → its mean over ranks. One collective for all keys, the same on every rank (a key this
    rank lacks counts 0), so no rank waits on another's different call."""
    sums, counts = [], []
    for k in keys:
        v = metrics.get(k)
        v = torch.zeros(0) if v is None else v.detach().float()
        sums.append(v.sum().cpu())
        counts.append(float(v.numel()))
    stats = torch.stack([torch.stack(sums), torch.tensor(counts)])                    # (2, K)
    if ctx.world > 1:
        dev = next(iter(metrics.values())).device
        stats = ctx.all_sum(stats.to(dev)).cpu()
    return {k: stats[0, i] / stats[1, i] for i, k in enumerate(keys) if stats[1, i] > 0}
