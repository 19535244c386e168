"""`mens gate`'s slow acceptance: a gain within noise fails as not significant.
A file of its own so that `make test-slow`'s workers (pytest-xdist, --dist loadfile) gate
the acceptance adapters side by side."""
from __future__ import annotations

import pytest

from mens.run.receipt import promotable


@pytest.mark.slow
def test_a_gain_within_noise_fails_as_not_significant(two_step_run):
    run, receipt = two_step_run
    assert receipt["verdict"] == "fail"
    lo, hi = receipt["in_domain"]["gain"]["ci"]
    why = receipt["reasons"][0]
    assert why.startswith("in-domain vox_lang loss: gain") and "not significant" in why
    assert f"[{lo:+.3f}, {hi:+.3f}]" in why and lo <= 0.005 and "gate.min_gain=0.005" in why
    assert not promotable(run)[0]
