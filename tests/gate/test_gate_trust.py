"""`mens gate` on what it cannot know (issue #37), on real tiny adapters through `mens eval`:
one held-out record is too few to judge (with the default floor, and with it lowered: the exact
test gives p = 1/2); a guard on an lm-eval group fails when the tuned model loses on the group's
subtasks; a guard on a metric that is not a mean of its documents fails as "cannot judge"."""
from __future__ import annotations

import json
from pathlib import Path

from gate.conftest import gate
from train_util import run_copy

ONE = ["logger=csv", "gate.metric=loss", "gate.max_prompts=1", "gate.k=1",
       "gate.max_new_tokens=8", "gate.collateral=false"]
MC_YAML = Path(__file__).parent.parent / "eval" / "tasks" / "arith_mc.yaml"
GROUP, MCC = "mens_guard", "mens_guard_mcc"


def test_one_held_out_record_is_too_few_to_judge(tiny_run, tmp_path):
    """Small user data holds out one record, gated on its loss: the adapter lowers it, and the
    gate still says it cannot tell — by default (the floor), and with the floor lowered to 1
    (one item's exact one-sided p is 1/2: no 95 % bound exists)."""
    from mens.gate.run import render

    run = run_copy(tiny_run, tmp_path / "one")
    receipt = gate(run, *ONE)
    own = receipt["in_domain"]
    assert own["n"] == 1 and own["gain"]["value"] > 0        # a gain, on one record
    assert receipt["verdict"] == "fail" and len(receipt["reasons"]) == 1
    assert own["verdict"] == "too few to judge: n=1 < eval.min_items=20"
    assert receipt["reasons"][0].startswith("in-domain vox_lang loss: gain +")
    assert "too few to judge: n=1 < eval.min_items=20 (exact one-sided p of no gain: 0.5)" in \
        receipt["reasons"][0]
    assert receipt["floor"] == {"min_items": 20, "default": 20, "lowered": False}
    shown = render(receipt)
    assert "too few to judge: n=1" in shown and "eval.min_items=20" in shown
    # the floor lowered to 1: the same eval.json serves; the verdict does not change, and the
    # receipt records the lowered floor
    receipt = gate(run, *ONE, "eval.min_items=1")
    assert receipt["verdict"] == "fail" and receipt["in_domain"]["gain"]["p"] == 0.5
    assert receipt["in_domain"]["verdict"] == \
        "cannot judge: no interval (n=1: too few items for an exact bound)"
    on_disk = json.loads((run / "gate.json").read_text())
    assert on_disk["floor"] == {"min_items": 1, "default": 20, "lowered": True}
    assert "(lowered from 20)" in render(receipt)


def _mc_task(where: Path, name: str, docs: list[dict], metrics: str | None = None) -> None:
    """An lm-eval multiple-choice task over `docs` (tests/eval/tasks/arith_mc.yaml's form),
    its data at an absolute path; `metrics`: another metric_list."""
    with open(where / f"{name}.jsonl", "w") as f:
        f.writelines(json.dumps(d) + "\n" for d in docs)
    text = MC_YAML.read_text().replace("task: mens_arith_mc", f"task: {name}").replace(
        "test: arith_mc.jsonl", f"test: {where / name}.jsonl")
    if metrics:
        text = text[:text.index("metric_list:")] + metrics + "metadata:\n  version: 1.0\n"
    (where / f"{name}.yaml").write_text(text)


def test_a_group_guard_fails_when_the_tuned_model_loses_on_its_subtasks(tiny_run, tmp_path,
                                                                         monkeypatch):
    """The tuned model: the tiny adapter with its lora_B × 20 (a different model). The group:
    two subtasks of 10 arithmetic questions each, chosen where base and tuned pick different
    answers (lm-eval's own scoring, run here on a pool of 60), keyed to the base's pick — so
    the tuned model loses every document. `gate.guard_tasks=[the group]` fails on the group
    row, resampled over the subtasks' 20 documents; a guard on MCC (a corpus-level metric: no
    per-document values) fails as "cannot judge"."""
    from omegaconf import OmegaConf
    from serve_util import adapter_copy

    from mens.compare.core import load_models
    from mens.config.compose import compose
    from mens.eval.harness import run_tasks

    # lm-eval bootstraps MCC's stderr in a multiprocessing pool (a fork of this process per
    # core, ~12 s here); serially it takes milliseconds and gives the same kind of number
    monkeypatch.setenv("DISABLE_MULTIPROC", "1")
    hurt = adapter_copy(tiny_run, tmp_path / "hurt", 20.0)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    pool = [{"question": f"What is {a} + {b}?", "answer": 0,
             "choices": [str(a + b + o) for o in (0, 1, -1, 10)]}
            for a in range(2, 12) for b in range(1, 7)]
    _mc_task(tasks, "mens_pool", pool)
    (slots, base), (_, tuned) = load_models(hurt, OmegaConf.load(hurt / "spec.yaml"))
    ev = compose(["eval.tasks=[mens_pool]", f"eval.include_path={tasks}"]).eval
    picks = {}
    try:
        for label, slot in (("base", base), ("tuned", tuned)):
            with slots.activate(slot):
                res = run_tasks(slots.model, slots.tokenizer, ev, label=label, batch_size=8,
                                max_length=512)
            lls = res["tasks"]["mens_pool"]["responses"]["none"]
            picks[label] = [max(range(4), key=lambda c: lls[str(i)][c][0])
                            for i in range(len(pool))]
    finally:
        slots.close()
    differ = [dict(pool[i], answer=picks["base"][i]) for i in range(len(pool))
              if picks["base"][i] != picks["tuned"][i]][:20]
    assert len(differ) == 20, f"only {len(differ)} of {len(pool)} documents differ"
    _mc_task(tasks, f"{GROUP}_a", differ[:10])
    _mc_task(tasks, f"{GROUP}_b", differ[10:])
    (tasks / f"{GROUP}.yaml").write_text(
        f"group: {GROUP}\ntask: [{GROUP}_a, {GROUP}_b]\naggregate_metric_list:\n"
        f"  - metric: acc\n    weight_by_size: true\nmetadata:\n  version: 1.0\n")
    _mc_task(tasks, MCC, differ, "metric_list:\n  - metric: mcc\n    aggregation: "
                                 "matthews_corrcoef\n    higher_is_better: true\n")

    receipt = gate(hurt, *ONE, f"gate.guard_tasks=[{GROUP},{MCC}]",
                   f"eval.include_path={tasks}")
    assert receipt["verdict"] == "fail"
    guards = {r["name"]: r for r in receipt["guards"]}
    assert set(guards) == {f"{GROUP}/acc", f"{MCC}/mcc"}      # the group, not its subtasks
    grp = guards[f"{GROUP}/acc"]
    assert grp["n"] == 20 and grp["ci_method"] == ("McNemar's exact test over the "
                                                 "documents that differ (0/1 scores)")
    assert grp["base"]["value"] == 1.0 and grp["tuned"]["value"] <= 0.1
    assert grp["gain"]["ci"][1] < -0.05 and grp["verdict"] == "a confident loss (n=20)"
    assert any(r.startswith(f"benchmark {GROUP}/acc: loses +") and "over 20 items" in r
               and "gate.max_regression=0.05" in r for r in receipt["reasons"]), \
        receipt["reasons"]
    mcc = guards[f"{MCC}/mcc"]
    assert mcc["gain"]["ci"] is None and mcc["verdict"] == "cannot judge: no interval (n=20)"
    assert any(r.startswith(f"benchmark {MCC}/mcc: cannot judge: no interval (n=20) — a guard "
                            f"that cannot judge fails the gate") for r in receipt["reasons"])
    assert receipt["eval"]["task_versions"][GROUP] == "1.0"
