"""`mens gate`: real tiny adapters measured on every spoke; gate.json says pass or fail."""
from __future__ import annotations

import json

import pytest

from mens.config.options import spokes
from mens.run.receipt import RECEIPT, artifact_sha256, promotable, receipt_status


def test_a_good_adapter_passes(good_run):
    run, receipt = good_run
    on_disk = json.loads((run / RECEIPT).read_text())
    assert on_disk == json.loads(json.dumps(receipt))            # the receipt is what returned
    assert receipt["verdict"] == "pass" and receipt["reasons"] == []
    own = receipt["spoke_result"]
    assert own["spoke"] == "vox_lang" and own["check"] == "vox_parses"
    assert own["loss_tuned"] < own["loss_base"] and own["loss_change_pct"] < -1.0
    assert own["records"] == 2 and own["pass_base"]["verified"] + \
        own["pass_base"]["unverified"] == 2
    assert set(receipt["collateral"]) == set(spokes()) - {"vox_lang"}
    assert all(abs(c["loss_change_pct"]) < 10 for c in receipt["collateral"].values())
    assert receipt["artifact_sha256"] == artifact_sha256(run)
    assert receipt["thresholds"]["max_collateral_pct"] == 10.0
    assert [x["corpus"] for x in receipt["corpus_lock"]["vox_lang"]][0].startswith("vox_lang/")
    assert promotable(run) == (True, f"{run} passed its gate (gate.json)")


@pytest.mark.slow
def test_an_adapter_trained_to_hurt_fails(hurt_run):
    run, receipt = hurt_run
    assert receipt["verdict"] == "fail"
    hurt = [s for s, c in receipt["collateral"].items() if c["loss_change_pct"] > 10]
    assert hurt, receipt["collateral"]
    assert any(r.startswith(f"collateral {hurt[0]}: eval loss") and "gate.max_collateral_pct=10"
               in r for r in receipt["reasons"])
    ok, why = promotable(run)
    assert not ok and "failed its gate" in why and "max_collateral_pct" in why


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
