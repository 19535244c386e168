"""`mens gate`: real tiny adapters evaluated by `mens eval` (both models on the same items, every
metric with its interval); gate.json says pass or fail, and why, with the numbers."""
from __future__ import annotations

import json

from mens.config.options import spokes
from mens.run.receipt import RECEIPT, artifact_sha256, promotable, receipt_status
from gate.conftest import FAST_GATE, gate


def test_a_good_adapter_passes(good_run):
    run, receipt = good_run
    on_disk = json.loads((run / RECEIPT).read_text())
    assert on_disk == json.loads(json.dumps(receipt))            # the receipt is what returned
    assert receipt["verdict"] == "pass" and receipt["reasons"] == []
    own = receipt["in_domain"]
    assert receipt["metric"] == "loss" and own["name"] == "vox_lang/loss" and own["n"] == 6
    lo, hi = own["gain"]["ci"]
    assert 0 < lo <= own["gain"]["value"] <= hi                  # significant: above 0
    # 6 items: the exact interval, on a floor lowered from 20 — both recorded
    assert own["gain"]["method"] == "exact" and own["verdict"] == "significant (n=6)"
    assert receipt["floor"] == {"min_items": 6, "default": 20, "lowered": True}
    assert all(r["verdict"] == "no confident loss (n=6)" for r in receipt["guards"])
    assert own["tuned"]["value"] < own["base"]["value"]
    guarded = {r["spoke"] for r in receipt["guards"]}
    assert guarded == set(spokes()) - {"vox_lang"}
    assert {r["metric"] for r in receipt["guards"]} == {"loss", "greedy"}
    assert receipt["artifact_sha256"] == artifact_sha256(run)
    assert receipt["thresholds"]["max_regression"] == 0.05
    ev = json.loads((run / "eval.json").read_text())
    assert receipt["eval"]["spec"]["k"] == 1 and receipt["eval"]["items"]["vox_lang/loss"] == 6
    assert ev["kind"] == "mens.eval" and len(ev["items"]["in_domain/vox_lang"]) == 6
    assert [x["corpus"] for x in receipt["corpus_lock"]["vox_lang"]][0].startswith("vox_lang/")
    assert promotable(run) == (True, f"{run} passed its gate (gate.json)")


def test_the_gate_reuses_an_eval_that_serves_it_and_reruns_a_stale_one(good_run, tmp_path,
                                                                        capsys):
    import shutil

    from mens.config.compose import compose
    from mens.gate.run import eval_config, stale

    run = shutil.copytree(good_run[0], tmp_path / "again")
    ev = json.loads((run / "eval.json").read_text())
    need = eval_config(compose([f"run={run}", *FAST_GATE]))
    assert stale(ev, need, artifact_sha256(run)) is None
    assert stale(ev, eval_config(compose([*FAST_GATE, "gate.k=4"])), artifact_sha256(run)) \
        == "eval.json has eval.k=1, the gate needs 4"
    assert "other adapter bytes" in stale(ev, need, "0" * 64)
    old = {**ev, "rows": [{**r, "gain": {"value": r["gain"]["value"], "ci": r["gain"]["ci"]}}
                          for r in ev["rows"]]}                 # an eval.json from before #37
    assert stale(old, need, artifact_sha256(run)) == \
        "eval.json predates exact intervals for few items (its gains carry no method)"
    assert "guard task(s) arc_easy" in stale(ev, eval_config(compose(
        [*FAST_GATE, "gate.guard_tasks=[arc_easy]"])), artifact_sha256(run))
    receipt = gate(run, *FAST_GATE)
    assert "mens gate: using" in capsys.readouterr().out and receipt["verdict"] == "pass"


def test_a_retrained_adapter_voids_its_receipt(good_run, tmp_path):
    import shutil
    run = shutil.copytree(good_run[0], tmp_path / "edited")
    assert receipt_status(run)[0] == "pass"
    with open(run / "adapter" / "adapter_config.json", "a") as f:
        f.write("\n")
    status, why = receipt_status(run)
    assert status == "void" and "retrained or edited" in why and not promotable(run)[0]
    (run / RECEIPT).unlink()
    assert receipt_status(run)[0] == "none" and "mens gate run=" in promotable(run)[1]


def test_cli_needs_a_finished_run(mens_cli, tmp_path):
    p = mens_cli("mens.gate")
    assert p.returncode == 2 and "mens gate run=" in p.stderr
    p = mens_cli("mens.gate", f"run={tmp_path}")
    assert p.returncode == 2 and "not a finished training run" in p.stderr
