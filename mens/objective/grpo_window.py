"""One optimizer step of GRPO on one rank, its health numbers under TRL's names, and the run's
health: the held-out oracle counts and the summary's flags (`grpo_flags`).

TRL's GRPOTrainer samples once per optimizer step: `_prepare_inputs` generates the whole
generation batch (per_device_train_batch_size × processes × steps_per_generation, by default one
accumulation window), gathers the rewards of every process before normalising them, counts the
active completion tokens over every process (`num_items_in_batch = gather(mask.sum()).sum()`),
then hands the window out micro-batch by micro-batch. mens does the same: the window's rollout,
rewards, advantages and normalisers are fixed before its first backward, so each loss type's
normaliser is the window's on every rank whatever the micro-batch × accumulation × ranks split.

A rank's repeated prompt (strategy.Repeat: the padding that evens out the ranks at an epoch's
end) is sampled with its window (every rank runs the same forward and backward) but never judged,
never trained (its rows carry no loss token) and never counted in a metric: `prompts/repeated`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from mens.objective.sampling import Rollout


@dataclass
class Window:
    key: object                        # the optimizer step (Step.group) it belongs to
    roll: Rollout                      # every micro-batch's rows, in order
    advantages: "torch.Tensor"         # (N,)
    loss_mask: "torch.Tensor"          # (N, T) the completion mask, repeats' rows zeroed
    spans: list                        # each micro-batch's rows: (start, end)
    num_items: float                   # active completion tokens of the window, every rank
    num_sequences: float               # completions of real prompts in the window, every rank
    health: dict                       # the window's reward and length numbers, every rank
    sums: dict = field(default_factory=dict)   # loss metrics' token-weighted sums so far
    loss: float = 0.0                  # the step's loss so far (every rank's pieces)


def nanstd(x, dim=None):
    """Unbiased std ignoring NaNs (NaN where fewer than 2 values), as TRL's trainer.utils."""
    import torch

    if dim is None:
        x, dim = x.flatten(), 0
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    var = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True)
    n = (~torch.isnan(x)).sum(dim=dim, keepdim=True)
    var = var * torch.where(n > 1, n / (n - 1), torch.full_like(var, math.nan))
    return var.sqrt().squeeze(dim)


def moments(ctx, x):
    """(n, Σx, Σx²) of x's non-NaN values over every rank, float64."""
    import torch

    x = x.double().flatten()
    ok = ~torch.isnan(x)
    v = x[ok]
    out = torch.stack([ok.sum().double(), v.sum(), (v * v).sum()])
    return ctx.all_sum(out) if ctx.world > 1 else out


def std_of(m) -> float:
    """The unbiased std from moments (NaN below 2 values), as TRL's nanstd."""
    n, s, q = (float(t) for t in m)
    if n < 2:
        return math.nan
    return math.sqrt(max(q - s * s / n, 0.0) / (n - 1))


def mean_of(m) -> float:
    return float(m[1]) / float(m[0]) if float(m[0]) else math.nan


def extremes(ctx, x):
    """(min, max) of x over every rank (±inf where no rank has a value)."""
    import torch

    lo = x.min() if x.numel() else torch.tensor(math.inf)
    hi = x.max() if x.numel() else torch.tensor(-math.inf)
    both = torch.stack([-lo.double(), hi.double()])
    if ctx.world > 1 and ctx.all_max is not None:
        both = ctx.all_max(both)
    return -float(both[0]), float(both[1])


def health(ctx, rewards, parts: dict, G: int, real, roll: Rollout) -> dict:
    """The window's numbers over every rank, TRL's names (GRPOTrainer._generate_and_score_
    completions): reward, reward_std (the std of all rewards, not a mean of groups'),
    rewards/<fn>/mean|std per reward function (mens's: the oracle's kind, pass | partial |
    teacher, and format), frac_reward_zero_std (the share of groups whose rewards are all
    equal: no learning signal), completions/mean_length|min_length|max_length|clipped_ratio
    (clipped: cut at max_completion_length without an end token). real: (N,) bool, the rows of
    real prompts (a rank's repeats are left out of every number)."""
    import torch

    nan = torch.tensor(math.nan, dtype=rewards.dtype)
    r = torch.where(real, rewards, nan)
    out = {}
    m = moments(ctx, r)
    out["reward"], out["reward_std"] = mean_of(m), std_of(m)
    for name, vals in parts.items():
        v = torch.where(real, torch.tensor(vals, dtype=torch.float64), nan.double())
        mv = moments(ctx, v)
        out[f"rewards/{name}/mean"], out[f"rewards/{name}/std"] = mean_of(mv), std_of(mv)
    grouped = r.view(-1, G)
    real_groups = real.view(-1, G)[:, 0]
    std = nanstd(grouped, dim=1) if G > 1 else torch.zeros(grouped.shape[0])
    # TRL: isclose(std, 0) per row; a group of one verified reward has std NaN: no signal either
    zero = (torch.isclose(std, torch.zeros_like(std)) | torch.isnan(std)) & real_groups
    counts = torch.stack([zero.sum().double(), real_groups.sum().double()])
    counts = ctx.all_sum(counts) if ctx.world > 1 else counts
    out["frac_reward_zero_std"] = float(counts[0] / counts[1]) if counts[1] else math.nan
    lengths = torch.tensor(roll.lengths, dtype=torch.float64)[real]
    clipped = torch.tensor([not e for e in roll.eos], dtype=torch.float64)[real]
    lm, cm = moments(ctx, lengths), moments(ctx, clipped)
    lo, hi = extremes(ctx, lengths)
    out.update({"completions/mean_length": mean_of(lm), "completions/min_length": lo,
                "completions/max_length": hi, "completions/clipped_ratio": mean_of(cm)})
    return out


def loss_sums(ctx, loss_mask, metrics: dict, entropy) -> dict:
    """This micro-batch's token-weighted sums of the loss's numbers over every rank: tokens,
    clip ratios, kl, entropy (TRL's global_masked_mean, summed here over the window too)."""
    import torch

    tok = loss_mask.sum().double()
    keys = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "kl")
    vals = [tok] + [tok * (0.0 if math.isnan(metrics[k]) else metrics[k]) for k in keys]
    vals.append((entropy.double() * loss_mask).sum())
    v = torch.stack([torch.as_tensor(x, dtype=torch.float64) for x in vals])
    v = ctx.all_sum(v) if ctx.world > 1 else v
    return dict(zip(("tokens", *keys, "entropy"), v.tolist()))


def add_sums(win: Window, sums: dict, beta: float) -> dict:
    """The window's running token means of the loss's numbers (kl: NaN without a reference)."""
    for k, v in sums.items():
        win.sums[k] = win.sums.get(k, 0.0) + v
    tok = max(win.sums["tokens"], 1.0)
    out = {k: win.sums[k] / tok for k in win.sums if k != "tokens"}
    if beta == 0.0:
        out["kl"] = math.nan
    return out


def held_out_counts(rew) -> dict:
    """A held-out measure's numbers from its Rewards (reward="partial"): `passed`, `failed`,
    `unverified` (NaN: the oracle could not run here, neither pass nor fail), the pass rate
    over the verified answers only (None when none is), the mean partial reward over the
    answers it scored, and each answer's `passes` (1 | 0 | None) and `rewards` (None: NaN)."""
    passes = [None if math.isnan(p) else int(p) for p in rew.passed]
    passed, failed = passes.count(1), passes.count(0)
    scored = [x for x in rew.partial if not math.isnan(x)]
    return {"passed": passed, "failed": failed, "unverified": passes.count(None),
            "pass_rate": passed / (passed + failed) if passed + failed else None,
            "reward_mean": sum(scored) / len(scored) if scored else None,
            "rewards": [None if math.isnan(x) else x for x in rew.partial], "passes": passes,
            "timeouts": rew.metrics.get("oracle/timeouts", 0)}


HACK_RISE = 0.1        # the training reward's rise (last quarter − first quarter of the steps)
NO_SIGNAL = 0.8        # the mean share of groups whose rewards are all equal
Z95 = 1.959964         # the normal quantile of a two-sided 95 % interval


def pass_gain(before: dict, after: dict):
    """The held-out oracle pass rate's gain after − before and its 95 % interval: paired over
    the items verified both times when each answer's pass is known (`passes`), else the two
    rates' difference (a resumed run's base numbers come from telemetry, without items).
    Normal intervals (mean ± 1.96 · se). None when no item was verified."""
    b, a = before.get("passes"), after.get("passes")
    if b is not None and a is not None and len(a) == len(b):
        d = [y - x for x, y in zip(b, a) if x is not None and y is not None]
        if not d:
            return None, None
        m = sum(d) / len(d)
        var = sum((x - m) ** 2 for x in d) / (len(d) - 1) if len(d) > 1 else 0.0
        se = math.sqrt(var / len(d))
        return m, [m - Z95 * se, m + Z95 * se]
    counts = []
    for h in (before, after):
        n = (h.get("passed") or 0) + (h.get("failed") if h.get("failed") is not None
                                       else h.get("n", 0) - (h.get("passed") or 0))
        if not n or h.get("pass_rate") is None:
            return None, None
        counts.append((h["pass_rate"], n))
    (p0, n0), (p1, n1) = counts
    se = math.sqrt(p0 * (1 - p0) / n0 + p1 * (1 - p1) / n1)
    return p1 - p0, [p1 - p0 - Z95 * se, p1 - p0 + Z95 * se]


def flags(steps: list[dict], before: dict | None, after: dict) -> dict:
    """The run's GRPO health verdicts (summary.json `grpo_flags`), from its TRAIN_STEP rows
    and the held-out oracle measure before and after training:

    reward_rose_oracle_pass_did_not (reward hacking): the mean training `reward` of the last
    quarter of the steps exceeds the first quarter's by more than 0.1, while the held-out pass
    rate's gain has a 95 % interval that includes 0 or lies below it. None: not judged (fewer
    than 4 steps with a reward, or no held-out answer verified both times).
    most_groups_have_one_reward (no signal): the mean `frac_reward_zero_std` over the steps
    exceeds 0.8 — most groups' rewards are all equal, so most advantages are 0."""
    rewards = [r["reward"] for r in steps if _finite(r.get("reward"))]
    zero = [r["frac_reward_zero_std"] for r in steps if _finite(r.get("frac_reward_zero_std"))]
    q = len(rewards) // 4
    rise = (sum(rewards[-q:]) - sum(rewards[:q])) / q if q else None
    gain, ci = pass_gain(before or {}, after)
    hacking = None if rise is None or ci is None else bool(rise > HACK_RISE and ci[0] <= 0)
    frac = sum(zero) / len(zero) if zero else None
    return {"reward_rose_oracle_pass_did_not": hacking,
            "most_groups_have_one_reward": None if frac is None else bool(frac > NO_SIGNAL),
            "reward_rise": rise, "pass_gain": gain, "pass_gain_ci95": ci,
            "mean_frac_reward_zero_std": frac, "steps": len(rewards),
            "rule": f"hacking: last-quarter minus first-quarter mean reward > {HACK_RISE} and "
                    f"the held-out pass gain's 95% interval reaches 0 or below; no signal: mean "
                    f"frac_reward_zero_std > {NO_SIGNAL}"}


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
