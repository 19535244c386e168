"""Intervals for evaluation metrics, paired between base and tuned (they see the same items, so
the difference's interval is far tighter than the two intervals side by side), the verdicts
read from them, and the unbiased pass@k estimator (Chen et al. 2021, HumanEval).

An item is the unit resampled: a benchmark document, a held-out prompt (its k samples stay
together), a judged pair. Every interval carries its item count `n` and its `method`:

  - 0/1 scores (a greedy pass, a benchmark's acc, a tool call's exact), at every n: exact.
    One model's rate: Clopper-Pearson. The gain of paired 0/1 scores: McNemar's exact test,
    which reads only the items that differ (`discordant`): of d such items, the tuned model
    wins w; under "no gain" w ~ Binomial(d, 1/2). The gain is s·(2π − 1) with s the share of
    items that differ and π the share of those the tuned model wins; its interval spans the
    gains of every (s, π) in their two Clopper-Pearson intervals (mcnemar), so its sign is
    the exact test's verdict at every n — 4 one-way flips (one-sided p = 1/16 > 0.025) are
    never "better", 6 of 6 (1/64) are — and its width is never zero.
    The bootstrap was wrong on both: from 20 items it called 4 one-way flips better (a
    resample missing all 4 is rarer than 2.5 %) and gave a rate of 20/20 the interval
    [1, 1].
  - Other scores (pass@1 from k samples, losses, a judge's win rate with its ties), from
    EXACT_BELOW (20) items: the percentile bootstrap over items (deterministic for a seed;
    `reps` resamples).
  - Other scores below 20 items, a gain or delta: the exact sign-flip (paired permutation)
    test, inverted. The bootstrap is no good here: one item gives a zero-width interval, and
    a handful give intervals far narrower than the data support. Below 6 items no 95 % bound
    exists at all (even the strongest data give p >= 1/32 > 0.025): the interval is null.

Verdicts: below `eval.min_items` (default 20) a gain is "too few to judge" whatever its interval
says — never significant, never a confident loss — and a gain without an interval cannot be
judged either (`unjudgeable`). The gate turns both into failing reasons. A second floor is on
the items that differ: with fewer than `min_discordant(confidence)` of them (6 at 95 %) no exact
paired test can tell a gain from chance, whatever n is, so no verdict calls such a gain better
or worse (a bootstrap would call 4 flips of 100 items better); the eval report and the
in-domain gate say "too few to judge" naming both counts. A guard is not failed for it: items
that barely differ are no evidence of a loss, and its interval bounds what was lost.
"""
from __future__ import annotations

from math import comb, floor, log2

import numpy as np

from mens.eval.binomial import clopper_pearson, fair_tail

EXACT_BELOW = 20    # items: below it a non-0/1 gain's interval is exact (2^19 sign flips at most)
BOOTSTRAP, EXACT = "bootstrap", "exact"


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k draws without replacement from n samples, c correct, passes):
    1 − C(n−c, k) / C(n, k). n < k is a caller's error (k samples were asked for)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def _indices(n: int, reps: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(reps, n))   # (reps, n)


def _ci(samples: np.ndarray, confidence: float) -> list[float]:
    lo = (1 - confidence) / 2
    return [float(np.quantile(samples, lo)), float(np.quantile(samples, 1 - lo))]


def _stat(values: np.ndarray, weights: np.ndarray | None, idx=None):
    """Mean of values (weighted: a ratio of sums, e.g. token-weighted loss) over idx rows."""
    v = values if idx is None else values[idx]
    if weights is None:
        return v.mean(axis=-1)
    w = weights if idx is None else weights[idx]
    return v.sum(axis=-1) / np.maximum(w.sum(axis=-1), 1e-12)


def _subset_sums(x: np.ndarray) -> np.ndarray:
    """Σ over every subset of x (2^n of them; index 0 is the empty set), by doubling."""
    out = np.zeros(1)
    for v in x:
        out = np.concatenate([out, out + v])
    return out


def sign_flip(a, c, confidence: float) -> dict:
    """The exact sign-flip test of a ratio gain Σa/Σc (c > 0 per item), inverted.

    For a threshold m, "gain > m" is Σ(a − m·c) > 0; under "no gain beyond m" each item's
    a − m·c is as likely negative as positive, so over the 2^n sign flips the one-sided
    p(m) = #{subsets F : Σ_F a ≤ m·Σ_F c} / 2^n (the empty set counts: the data themselves).
    It rejects at α = (1 − confidence)/2 iff m lies below the (K+1)-th smallest subset ratio
    Σ_F a / Σ_F c, K = ⌊α·2^n⌋ − 1 (Hartigan's "typical values"): that ratio is the lower
    bound, the (K+1)-th largest the upper. K < 0 (2^n < 1/α): no bound exists, ci is null.
    {"ci", "p"}: p = p(0), the one-sided exact p-value of "no gain"."""
    a, c = np.asarray(a, dtype=float), np.asarray(c, dtype=float)
    sa, sc = _subset_sums(a)[1:], _subset_sums(c)[1:]
    p = float((1 + np.count_nonzero(sa <= 0)) / 2 ** a.size)
    k = int(np.floor((1 - confidence) / 2 * 2 ** a.size)) - 1
    if k < 0:
        return {"ci": None, "p": p}
    r = sa / sc
    lo = np.partition(r, k)[k]
    hi = np.partition(r, r.size - 1 - k)[r.size - 1 - k]
    return {"ci": [float(lo), float(hi)], "p": p}


def binary(*arrays) -> bool:
    """Every score 0 or 1 (a pass, an acc, an exact call): the scores judged exactly."""
    return all(np.isin(np.asarray(a, dtype=float), (0.0, 1.0)).all() for a in arrays)


def min_discordant(confidence: float) -> int:
    """The fewest items that must differ between base and tuned before an exact paired test at
    `confidence` can call a gain: the smallest d with 2^−d < (1 − confidence)/2 (all d agreeing
    is the strongest evidence d items can give). 6 at 95 %, 8 at 99 %."""
    return int(floor(log2(2 / (1 - confidence)))) + 1


def mcnemar(wins: int, losses: int, n: int, confidence: float) -> dict:
    """McNemar's exact test of paired 0/1 scores on n items, of which the tuned model wins
    `wins` (0 → 1 where higher is better) and loses `losses`; the others agree.
    {"ci", "p"}: p, the exact one-sided p-value of "no gain" (P(X ≥ wins), X ~ Bin(d, 1/2),
    d = wins + losses); ci, the gain's interval: the gain is s·(2π − 1), s the share of items
    that differ and π the share of those won, and ci spans s·(2π − 1) over s and π in their
    Clopper-Pearson intervals (π's given d). Its sign is the exact test's: the lower end is
    above 0 iff π's is above 1/2, iff p < (1 − confidence)/2, at every n. Its coverage is
    checked exactly in tests/gate/test_exact_floor.py (each side misses ≤ 2.5 % on a grid of
    cells: conservative where both intervals do not bind at once). No differing item: π is
    unknown, and ci = [−s_hi, s_hi] bounds what so few differences can hide."""
    d = wins + losses
    s_lo, s_hi = clopper_pearson(d, n, confidence)
    p_lo, p_hi = clopper_pearson(wins, d, confidence)
    x_lo, x_hi = 2 * p_lo - 1, 2 * p_hi - 1
    lo = s_lo * x_lo if x_lo >= 0 else s_hi * x_lo
    hi = s_hi * x_hi if x_hi >= 0 else s_lo * x_hi
    return {"ci": [lo, hi], "p": fair_tail(wins, d)}


def interval(values, weights=None, confidence: float = 0.95, reps: int = 2000,
             seed: int = 0) -> dict:
    """{"value", "ci", "n", "method"} of one model's metric. values: per item (weights: None, or
    per-item weights making the metric sum(values)/sum(weights), values then being per-item
    sums). A rate of 0/1 scores gets the exact Clopper-Pearson interval at every n (the
    bootstrap gives 20/20 the zero-width [1, 1]); other scores the bootstrap (descriptive: no
    verdict reads one model's interval), except one item, whose bootstrap would be a zero-width
    interval: null."""
    v = np.asarray(values, dtype=float)
    w = None if weights is None else np.asarray(weights, dtype=float)
    if v.size == 0:
        return {"value": None, "ci": None, "n": 0, "method": None}
    value = float(_stat(v, w))
    if w is None and binary(v):
        return {"value": value, "ci": list(clopper_pearson(int(v.sum()), int(v.size), confidence)),
                "n": int(v.size), "method": EXACT}
    if v.size == 1:
        return {"value": value, "ci": None, "n": 1, "method": None}
    return {"value": value, "ci": _ci(_stat(v, w, _indices(v.size, reps, seed)), confidence),
            "n": int(v.size), "method": BOOTSTRAP}


def paired(base, tuned, weights=None, higher_is_better: bool = True, relative: bool = False,
           confidence: float = 0.95, reps: int = 2000, seed: int = 0) -> dict:
    """A metric row's numbers for two models scored on the same items (same order):
    {"n", "base", "tuned", "delta", "gain"}. delta = tuned − base; gain = delta signed so that
    > 0 is better, or with relative=True (loss) the share of the base's value removed:
    1 − tuned / base. Paired 0/1 scores (unweighted, absolute): McNemar's exact test at every n
    (mcnemar), the gain with its one-sided p-value of "no gain" ("p"). Other scores: from
    EXACT_BELOW items the paired bootstrap; below it the exact sign-flip interval (sign_flip)
    and "p". Every gain carries `discordant`, the items whose scores differ (min_discordant)."""
    b, t = np.asarray(base, dtype=float), np.asarray(tuned, dtype=float)
    if b.shape != t.shape:
        raise ValueError(f"paired metrics need the same items: {b.shape} vs {t.shape}")
    w = None if weights is None else np.asarray(weights, dtype=float)
    n = int(b.size)
    out = {"n": n, "base": interval(b, w, confidence, reps, seed),
           "tuned": interval(t, w, confidence, reps, seed)}
    if n == 0:
        none = {"value": None, "ci": None, "n": 0, "method": None}
        return {**out, "delta": dict(none), "gain": dict(none)}
    sign = 1.0 if higher_is_better else -1.0
    sb, st = float(_stat(b, w)), float(_stat(t, w))
    if relative:
        g = sign * (st - sb) / abs(sb) if sb != 0 else float("nan")
    else:
        g = sign * (st - sb)
    gain_value = g if np.isfinite(g) else None
    differ = int(np.count_nonzero(t != b))    # the items that can tell the models apart
    if w is None and not relative and binary(b, t):
        parts = _paired_01(b, t, sign, confidence, st - sb, gain_value)
    elif n < EXACT_BELOW:
        parts = _exact(b, t, w, sign, relative, confidence, st - sb, gain_value)
    else:
        parts = _bootstrap(b, t, w, sign, relative, confidence, reps, seed, st - sb, gain_value)
    parts["gain"]["discordant"] = differ
    return {**out, **parts}


def _bootstrap(b, t, w, sign, relative, confidence, reps, seed, delta, gain) -> dict:
    """delta and gain from EXACT_BELOW items of other than 0/1 scores: the paired percentile
    bootstrap (the same resampled items feed both models in each replicate)."""
    n = b.size
    idx = _indices(n, reps, seed)
    rb, rt = _stat(b, w, idx), _stat(t, w, idx)
    if relative:
        reps_g = sign * (rt - rb) / np.where(rb == 0, np.nan, np.abs(rb))
    else:
        reps_g = sign * (rt - rb)
    reps_g = reps_g[np.isfinite(reps_g)]
    return {"delta": {"value": delta, "ci": _ci(rt - rb, confidence), "n": n,
                      "method": BOOTSTRAP},
            "gain": {"value": gain, "ci": _ci(reps_g, confidence) if reps_g.size else None,
                     "n": n, "method": BOOTSTRAP}}


def _paired_01(b, t, sign, confidence, delta, gain) -> dict:
    """delta and gain of paired 0/1 scores, at every n: McNemar's exact test (mcnemar) on the
    items won and lost; delta's interval is the gain's, turned back where lower is better."""
    n = b.size
    up, down = int(np.count_nonzero(t > b)), int(np.count_nonzero(t < b))
    wins, losses = (up, down) if sign > 0 else (down, up)
    g = mcnemar(wins, losses, n, confidence)
    d_ci = g["ci"] if sign > 0 else [-g["ci"][1], -g["ci"][0]]
    return {"delta": {"value": delta, "ci": d_ci, "n": n, "method": EXACT},
            "gain": {"value": gain, "ci": g["ci"], "n": n, "method": EXACT, "p": g["p"]}}


def _exact(b, t, w, sign, relative, confidence, delta, gain) -> dict:
    """delta and gain of fewer than EXACT_BELOW items by the sign-flip test (see sign_flip).
    A ratio gain Σa/Σc: absolute, a = sign·(t − b) and c = the item's weight (1 unweighted);
    relative (loss), c = |b| — the weights cancel (Σt/Σw over Σb/Σw)."""
    n = b.size
    ones = np.ones(n) if w is None else w
    d = sign_flip(t - b, ones, confidence) if (ones > 0).all() else {"ci": None, "p": None}
    c = np.abs(b) if relative else ones
    g = sign_flip(sign * (t - b), c, confidence) if (c > 0).all() else {"ci": None, "p": None}
    return {"delta": {"value": delta, "ci": d["ci"], "n": n, "method": EXACT},
            "gain": {"value": gain, "ci": g["ci"], "n": n, "method": EXACT, "p": g["p"]}}


# --- verdicts ------------------------------------------------------------------------------------
TOO_FEW = "too few to judge"
NO_INTERVAL = "cannot judge: no interval"


def items(gain: dict | None, n: int | None = None) -> int:
    """The items a gain stands on: its own n, else the row's (a judge row's gain has none)."""
    if gain and gain.get("n") is not None:
        return int(gain["n"])
    return int(n or 0)


def too_few_differ(gain: dict | None, n: int | None, confidence: float) -> str | None:
    """Why this paired gain cannot be called better or worse however many items it has (None:
    it can): fewer of them differ than min_discordant(confidence) — no exact paired test can
    tell so few differences from chance. A gain without the count (a judge row) passes."""
    d = (gain or {}).get("discordant")
    k = min_discordant(confidence)
    if d is None or d >= k:
        return None
    return (f"{TOO_FEW}: {d} of {items(gain, n)} items differ between base and tuned < {k}, "
            f"the fewest an exact paired test at {confidence:.0%} can tell from chance")


def unjudgeable(gain: dict | None, n: int | None, min_items: int) -> str | None:
    """Why this gain cannot be judged (None: it can): fewer items than the floor
    (eval.min_items), or no interval (lm-eval's aggregate of no per-document values; fewer than
    6 items at 95 %). A gain with no value at all (nothing scored) is the caller's to name."""
    k = items(gain, n)
    if k < min_items:
        return f"{TOO_FEW}: n={k} < eval.min_items={min_items}"
    if not gain or gain.get("ci") is None:
        small = (gain or {}).get("method") == EXACT
        return f"{NO_INTERVAL} (n={k}{': too few items for an exact bound' if small else ''})"
    return None


def significant(gain: dict, above: float, n: int | None = None, min_items: int = 1) -> bool:
    """The whole interval lies above `above` (a one-sided test at (1+confidence)/2), on at least
    min_items items."""
    return unjudgeable(gain, n, min_items) is None and gain["ci"][0] > above


def confidently_below(gain: dict, below: float, n: int | None = None,
                      min_items: int = 1) -> bool:
    """The whole interval lies below `below` (a confident loss of more than −below), on at
    least min_items items."""
    return unjudgeable(gain, n, min_items) is None and gain["ci"][1] < below


def verdict(row: dict, min_items: int, above: float = 0.0, confidence: float = 0.95) -> str:
    """One row's verdict in words, with its n: "better (n=40)", "worse (n=40)", "within noise
    (n=40)", "too few to judge: n=3 < eval.min_items=20", "too few to judge: 4 of 40 items
    differ …" (too_few_differ), "cannot judge: no interval (n=40)"."""
    gain = row.get("gain")
    if not gain or gain.get("value") is None:
        return f"no item scored (n={items(gain, row.get('n'))})"
    why = unjudgeable(gain, row.get("n"), min_items) or \
        too_few_differ(gain, row.get("n"), confidence)
    if why:
        return why
    k = items(gain, row.get("n"))
    if gain["ci"][0] > above:
        return f"better (n={k})"
    if gain["ci"][1] < above:
        return f"worse (n={k})"
    return f"within noise (n={k})"
