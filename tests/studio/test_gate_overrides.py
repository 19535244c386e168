"""The gates the studio launches take the studio's own gate.* settings (what differs from the
defaults), as overrides on the child's command line."""
from __future__ import annotations


def test_only_what_differs_goes_on_the_command_line():
    from mens.config.compose import compose
    from mens.studio.app import gate_overrides

    assert gate_overrides(compose([]).gate) == []
    got = gate_overrides(compose(["gate.max_prompts=4", "gate.guard_tasks=[arc_easy,gsm8k]",
                                  "gate.collateral=false"]).gate)
    assert sorted(got) == ["gate.collateral=False", "gate.guard_tasks=[arc_easy,gsm8k]",
                           "gate.max_prompts=4"]
    assert compose(got).gate.collateral is False      # the child composes them back
