"""`mens gate`'s slow acceptance: an adapter trained to hurt fails and is refused promotion.
A file of its own so that `make test-slow`'s workers (pytest-xdist, --dist loadfile) gate
the acceptance adapters side by side."""
from __future__ import annotations

import pytest

from mens.run.receipt import promotable


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
