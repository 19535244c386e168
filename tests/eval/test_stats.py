"""mens.eval.stats below 20 items: the exact sign-flip interval against a brute-force
enumeration of every sign pattern, and against scipy's exact binomial (sign) test; every interval
carries its n; one model's 0/1 rate gets scipy's Clopper-Pearson interval. (0/1 scores at every
n, McNemar's test and the floor on differing items: tests/gate/test_exact_floor.py.)"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from mens.eval.stats import EXACT_BELOW, interval, paired, sign_flip, unjudgeable, verdict

ALPHA = 0.025    # one side of a 95 % interval


def brute_p(a, c, m) -> float:
    """P(Σ s·(a − m·c) ≥ Σ (a − m·c)) over all 2^n sign vectors s, counted one by one."""
    x = np.asarray(a, float) - m * np.asarray(c, float)
    obs = x.sum()
    signs = itertools.product((1, -1), repeat=len(x))
    return sum(np.dot(s, x) >= obs - 1e-12 for s in signs) / 2 ** len(x)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_exact_interval_is_the_inverted_sign_flip_test(seed):
    """For every threshold m: the lower bound lies above m exactly when the enumerated test
    rejects "gain ≤ m" at 2.5 % — weighted ratios (a token-weighted loss) included."""
    rng = np.random.default_rng(seed)
    n = 8
    a, c = rng.normal(0.3, 1.0, n), rng.uniform(0.5, 2.0, n)
    out = sign_flip(a, c, 0.95)
    lo, hi = out["ci"]
    assert out["p"] == pytest.approx(brute_p(a, c, 0.0))
    ratios = sorted({sum(a[list(f)]) / sum(c[list(f)]) for k in range(1, n + 1)
                     for f in itertools.combinations(range(n), k)})
    for m in [r + e for r in ratios[:12] + ratios[-12:] for e in (-1e-9, 1e-9)]:
        assert (lo > m) == (brute_p(a, c, m) <= ALPHA), m
        assert (hi < m) == (brute_p(-a, c, -m) <= ALPHA), m       # the other side


def test_paired_0_1_scores_get_the_exact_sign_test():
    """On 0/1 pairs the sign-flip test is the exact sign test (McNemar's) on the discordant
    pairs: scipy.stats.binomtest's one-sided p, whatever the ties."""
    from scipy.stats import binomtest

    for base, tuned in (([0, 0, 0], [1, 1, 1]),
                        ([0] * 10 + [1, 1, 0, 1], [1] * 10 + [1, 0, 0, 1]),
                        ([1, 0, 1, 0, 1, 1, 0], [0, 1, 1, 0, 1, 1, 1])):
        d = np.array(tuned) - np.array(base)
        up, down = int((d > 0).sum()), int((d < 0).sum())
        g = paired(base, tuned)["gain"]
        want = binomtest(up, up + down, 0.5, alternative="greater").pvalue
        assert g["method"] == "exact" and g["p"] == pytest.approx(want), (base, tuned)


def test_every_interval_knows_its_n_and_how_it_was_made():
    for n in (1, 3, 19, 20, 40):
        p = paired([0, 1] * (n // 2) + [0] * (n % 2), [1] * n)      # 0/1: exact at every n
        assert p["n"] == n
        for part in ("base", "tuned", "delta", "gain"):
            assert p[part]["n"] == n, (n, part)
        assert p["gain"]["method"] == "exact" and "p" in p["gain"]
        p = paired([0.5, 1] * (n // 2) + [0] * (n % 2), [1] * n)    # other scores
        assert p["gain"]["method"] == ("exact" if n < EXACT_BELOW else "bootstrap")
        assert ("p" in p["gain"]) == (n < EXACT_BELOW)
    # one item: no interval at all (a zero-width one would claim certainty)
    one = paired([2.0], [1.0], higher_is_better=False, relative=True)
    assert one["gain"] == {"value": 0.5, "ci": None, "n": 1, "method": "exact", "p": 0.5,
                           "discordant": 1}
    assert one["base"]["ci"] is None
    assert paired([], [])["gain"] == {"value": None, "ci": None, "n": 0, "method": None}


def test_one_models_small_rate_is_clopper_pearson():
    from scipy.stats import binomtest

    r = interval([1, 1, 0, 1, 0])
    ci = binomtest(3, 5).proportion_ci(0.95, method="exact")
    assert r == {"value": 0.6, "ci": pytest.approx([ci.low, ci.high], abs=1e-12), "n": 5,
                 "method": "exact"}
    assert interval([1] * 30)["method"] == "exact"            # 0/1: at every n (issue #49)
    assert interval([0.5, 1] * 15)["method"] == "bootstrap"   # other scores: from 20 items


def test_verdicts_show_n_and_the_floor():
    strong = {"n": 3, **paired([0] * 3, [1] * 3)}
    assert verdict(strong, 20) == "too few to judge: n=3 < eval.min_items=20"
    assert verdict(strong, 1) == ("too few to judge: 3 of 3 items differ between base and tuned "
                                  "< 6, the fewest an exact paired test at 95% can tell from "
                                  "chance")
    small = paired([2.0, 3.0, 4.0], [1.0, 2.0, 3.0])        # other scores: sign flips, no bound
    assert unjudgeable(small["gain"], 3, 1) == \
        "cannot judge: no interval (n=3: too few items for an exact bound)"
    assert verdict({"n": 20, **paired([0] * 20, [1] * 20)}, 20) == "better (n=20)"
    assert verdict({"n": 20, **paired([1] * 20, [0] * 20)}, 20) == "worse (n=20)"
    assert verdict({"n": 40, **paired([0, 1] * 20, [1, 0] * 20)}, 20) == "within noise (n=40)"
    # a judge row's gain has no n of its own: the row's counts
    assert unjudgeable({"value": 0.1, "ci": [0.0, 0.2]}, 12, 20).startswith("too few")
