"""`mens gate`'s slow acceptance: a well-trained adapter passes the default gate.
A file of its own so that `make test-slow`'s workers (pytest-xdist, --dist loadfile) gate
the acceptance adapters side by side."""
from __future__ import annotations

import pytest

from mens.config.options import spokes


@pytest.mark.slow
def test_a_well_trained_adapter_passes_the_default_gate(well_trained):
    run, receipt = well_trained
    assert receipt["verdict"] == "pass", receipt["reasons"]
    own = receipt["in_domain"]
    # the tiny rung's pass@1 is at its floor: auto gates the loss and says why
    assert receipt["metric"] == "loss" and "floor" in receipt["metric_why"]
    assert own["n"] == 40 and own["gain"]["ci"][0] > receipt["thresholds"]["min_gain"]
    assert receipt["eval"]["spec"]["k"] == 4 and receipt["eval"]["spec"]["max_prompts"] == 64
    assert len(receipt["guards"]) == 2 * (len(spokes()) - 1)
    print(f"\nwell-trained: vox_lang loss gain {own['gain']['value']:+.4f} {own['gain']['ci']}")
