"""Intervals for evaluation metrics: percentile bootstrap over items, paired between base and
tuned (they see the same items, so the difference's interval is far tighter than the two
intervals side by side), and the unbiased pass@k estimator (Chen et al. 2021, HumanEval).

Plain numpy; deterministic for a given seed. An item is the unit resampled: a benchmark
document, a held-out prompt (its k samples stay together), a judged pair.
"""
from __future__ import annotations

from math import comb

import numpy as np


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


def interval(values, weights=None, confidence: float = 0.95, reps: int = 2000,
             seed: int = 0) -> dict:
    """{"value", "ci"} of one model's metric. values: per item (weights: None, or per-item
    weights making the metric sum(values)/sum(weights), values then being per-item sums)."""
    v = np.asarray(values, dtype=float)
    w = None if weights is None else np.asarray(weights, dtype=float)
    if v.size == 0:
        return {"value": None, "ci": None}
    value = float(_stat(v, w))
    if v.size == 1:
        return {"value": value, "ci": [value, value]}
    return {"value": value, "ci": _ci(_stat(v, w, _indices(v.size, reps, seed)), confidence)}


def paired(base, tuned, weights=None, higher_is_better: bool = True, relative: bool = False,
           confidence: float = 0.95, reps: int = 2000, seed: int = 0) -> dict:
    """A metric row's numbers for two models scored on the same items (same order):
    {"n", "base", "tuned", "delta", "gain"}. The same resampled items feed both models in each
    bootstrap replicate. delta = tuned − base; gain = delta signed so that > 0 is better, or
    with relative=True (loss) the share of the base's value removed: 1 − tuned / base."""
    b, t = np.asarray(base, dtype=float), np.asarray(tuned, dtype=float)
    if b.shape != t.shape:
        raise ValueError(f"paired metrics need the same items: {b.shape} vs {t.shape}")
    w = None if weights is None else np.asarray(weights, dtype=float)
    out = {"n": int(b.size), "base": interval(b, w, confidence, reps, seed),
           "tuned": interval(t, w, confidence, reps, seed)}
    if b.size == 0:
        return {**out, "delta": {"value": None, "ci": None}, "gain": {"value": None, "ci": None}}
    idx = _indices(b.size, reps, seed) if b.size > 1 else None
    sb, st = _stat(b, w), _stat(t, w)
    rb = _stat(b, w, idx) if idx is not None else np.array([sb])
    rt = _stat(t, w, idx) if idx is not None else np.array([st])
    sign = 1.0 if higher_is_better else -1.0
    delta = {"value": float(st - sb), "ci": _ci(rt - rb, confidence)}
    if relative:
        gain_of = (lambda x, y: sign * (y - x) / np.where(x == 0, np.nan, np.abs(x)))
    else:
        gain_of = (lambda x, y: sign * (y - x))
    g = gain_of(np.asarray(sb), np.asarray(st))
    reps_g = gain_of(rb, rt)
    reps_g = reps_g[np.isfinite(reps_g)]
    gain = {"value": float(g) if np.isfinite(g) else None,
            "ci": _ci(reps_g, confidence) if reps_g.size else None}
    return {**out, "delta": delta, "gain": gain}


def significant(gain: dict, above: float) -> bool:
    """The whole interval lies above `above` (a one-sided test at (1+confidence)/2)."""
    return gain.get("ci") is not None and gain["ci"][0] > above


def confidently_below(gain: dict, below: float) -> bool:
    """The whole interval lies below `below` (a confident loss of more than −below)."""
    return gain.get("ci") is not None and gain["ci"][1] < below
