"""`mens gate`: real tiny adapters evaluated by `mens eval` (both models on the same items, every
metric with its interval); gate.json says pass or fail, and why, with the numbers."""
from __future__ import annotations

import json

import pytest

from mens.config.options import spokes
from mens.run.receipt import RECEIPT, artifact_sha256, promotable, receipt_status
from gate.conftest import FAST_GATE, gate


def test_a_good_adapter_passes(good_run):
    run, receipt = good_run
    on_disk = json.loads((run / RECEIPT).read_text())
    assert on_disk == json.loads(json.dumps(receipt))            # the receipt is what returned
    assert receipt["verdict"] == "pass" and receipt["reasons"] == []
    own = receipt["in_domain"]
    assert receipt["metric"] == "loss" and own["name"] == "vox_lang/loss" and own["n"] == 4
    lo, hi = own["gain"]["ci"]
    assert 0 < lo <= own["gain"]["value"] <= hi                  # significant: above 0
    assert own["tuned"]["value"] < own["base"]["value"]
    guarded = {r["spoke"] for r in receipt["guards"]}
    assert guarded == set(spokes()) - {"vox_lang"}
    assert {r["metric"] for r in receipt["guards"]} == {"loss", "greedy"}
    assert receipt["artifact_sha256"] == artifact_sha256(run)
    assert receipt["thresholds"]["max_regression"] == 0.05
    ev = json.loads((run / "eval.json").read_text())
    assert receipt["eval"]["spec"]["k"] == 1 and receipt["eval"]["items"]["vox_lang/loss"] == 4
    assert ev["kind"] == "mens.eval" and len(ev["items"]["in_domain/vox_lang"]) == 4
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
    assert "guard task(s) arc_easy" in stale(ev, eval_config(compose(
        [*FAST_GATE, "gate.guard_tasks=[arc_easy]"])), artifact_sha256(run))
    receipt = gate(run, *FAST_GATE)
    assert "mens gate: using" in capsys.readouterr().out and receipt["verdict"] == "pass"


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


@pytest.mark.slow
def test_a_gain_within_noise_fails_as_not_significant(two_step_run):
    run, receipt = two_step_run
    assert receipt["verdict"] == "fail"
    lo, hi = receipt["in_domain"]["gain"]["ci"]
    why = receipt["reasons"][0]
    assert why.startswith("in-domain vox_lang loss: gain") and "not significant" in why
    assert f"[{lo:+.3f}, {hi:+.3f}]" in why and lo <= 0.005 and "gate.min_gain=0.005" in why
    assert not promotable(run)[0]


@pytest.mark.slow
def test_an_adapter_trained_to_hurt_fails(hurt_run):
    run, receipt = hurt_run
    assert receipt["verdict"] == "fail"
    hurt = [r for r in receipt["guards"] if r["metric"] == "loss" and r["gain"]["ci"][1] < -0.05]
    assert hurt, receipt["guards"]
    assert any(r.startswith(f"collateral {hurt[0]['name']}: loses") and
               "gate.max_regression=0.05" in r for r in receipt["reasons"])
    ok, why = promotable(run)
    assert not ok and "failed its gate" in why and "max_regression" in why


@pytest.mark.slow
def test_the_hurtful_adapter_is_refused_by_server_and_cli(good_run, hurt_run, tmp_path):
    """The failed receipt in use: served beside the good run, /admin/promote answers 409 and
    `mens.serve promote` exits 3 (the page's refusal: tests/studio/test_roundtrip.py)."""
    import subprocess
    import sys

    import httpx
    from serve_util import running_server

    with running_server(tmp_path, f"run={good_run[0]}",
                        f"serve.adapters=['hurt={hurt_run[0]}']") as (url, proc):
        r = httpx.post(f"{url}/admin/promote", json={"spoke": "vox_lang", "slot": "hurt"})
        assert r.status_code == 409 and "failed its gate" in r.json()["error"]["message"], r.text
        cli = subprocess.run([sys.executable, "-m", "mens.serve", "promote", "vox_lang", "hurt",
                              f"serve.port={url.rsplit(':', 1)[1]}",
                              f"hydra.run.dir={tmp_path / 'admin'}"],
                             capture_output=True, text=True, timeout=120)
        assert cli.returncode == 3 and "failed its gate" in cli.stderr, cli.stderr
        aliases = httpx.get(f"{url}/admin/aliases").json()["aliases"]["vox_lang"]
        assert aliases["champion"] == good_run[0].name and proc.poll() is None


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
