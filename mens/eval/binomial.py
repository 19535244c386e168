"""The exact binomial arithmetic mens.eval.stats reads 0/1 scores with: the exact one-sided
tail of a fair coin (the sign test / McNemar's exact test on the items that differ) and the
Clopper-Pearson interval of a proportion.

Written here, not taken from scipy: scipy is no declared dependency of mens (it arrives only
through lm-eval's), and this is a few lines — the tail with math.comb in integers (exact), the
interval's ends as Beta quantiles (Clopper-Pearson's identity) by bisection on the regularised
incomplete Beta function (Lentz's continued fraction, as Numerical Recipes §6.4). The tests
check both against scipy.stats.binomtest where it is installed.
"""
from __future__ import annotations

from fractions import Fraction
from math import comb, exp, lgamma, log


def fair_tail(k: int, n: int) -> float:
    """P(X ≥ k) for X ~ Binomial(n, 1/2), exactly (integers, then one rounding)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    c = total = comb(n, k)
    for j in range(k + 1, n + 1):        # C(n, j) from C(n, j − 1): exact in integers
        c = c * (n - j + 1) // j
        total += c
    return float(Fraction(total, 2 ** n))


def _cf(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz); converges fast for
    x < (a + 1) / (a + b + 2)."""
    tiny, eps = 1e-300, 1e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                    -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularised incomplete Beta function I_x(a, b), a, b > 0."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log(1.0 - x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _cf(a, b, x) / a
    return 1.0 - front * _cf(b, a, 1.0 - x) / b


def beta_quantile(q: float, a: float, b: float) -> float:
    """x with I_x(a, b) = q, by bisection (I is increasing in x): to within 1e-15."""
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-15:
        mid = (lo + hi) / 2
        if beta_cdf(mid, a, b) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def clopper_pearson(k: int, n: int, confidence: float) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a proportion from k successes in n trials:
    each end excludes only what a one-sided exact binomial test rejects at (1 − confidence)/2.
    n = 0: nothing is known, (0, 1)."""
    if n <= 0:
        return 0.0, 1.0
    half = (1.0 - confidence) / 2
    lo = 0.0 if k <= 0 else beta_quantile(half, k, n - k + 1)
    hi = 1.0 if k >= n else beta_quantile(1.0 - half, k + 1, n - k)
    return lo, hi
