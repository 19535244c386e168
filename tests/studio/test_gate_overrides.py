"""The gates the studio launches take the studio's own gate.* settings and eval.min_items (what
differs from the defaults), as overrides on the child's command line."""
from __future__ import annotations


def test_only_what_differs_goes_on_the_command_line():
    from mens.config.compose import compose
    from mens.studio.app import gate_overrides

    assert gate_overrides(compose([])) == []
    got = gate_overrides(compose(["gate.max_prompts=4", "gate.guard_tasks=[arc_easy,gsm8k]",
                                  "gate.collateral=false", "eval.min_items=6", "eval.k=3"]))
    assert sorted(got) == ["eval.min_items=6", "gate.collateral=False",
                           "gate.guard_tasks=[arc_easy,gsm8k]", "gate.max_prompts=4"]
    back = compose(got)                               # the child composes them back
    assert back.gate.collateral is False and back.eval.min_items == 6
