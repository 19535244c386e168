"""Only a run whose gate passes may become champion: Slots, /admin/promote and
`mens.serve promote` refuse anything else; serve's key comes only from the environment."""
from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from serve_util import adapter_copy, running_server


@pytest.fixture(scope="module")
def ungated(good_run, tmp_path_factory):
    """The good run's adapter scaled (another adapter of vox_lang) with no gate.json."""
    return adapter_copy(good_run[0], tmp_path_factory.mktemp("promote") / "ungated", 2.0)


def test_slots_refuse_an_ungated_promotion(good_run, ungated):
    from mens.run.rundir import RunDir
    from mens.serve.slots import PromotionRefused, Slots, Source

    rung = RunDir(good_run[0]).read_spec()["rung"]
    # the ungated adapter is loaded first, yet the gated one becomes champion
    slots = Slots(rung, [Source.parse(f"ungated={ungated}"), Source.parse(f"good={good_run[0]}")])
    try:
        assert slots.aliases["vox_lang"] == {"champion": "good", "challenger": "ungated"}
        with pytest.raises(PromotionRefused, match="has no gate.json") as e:
            slots.promote("vox_lang", "ungated")
        assert e.value.code == 3 and slots.aliases["vox_lang"]["champion"] == "good"
        slots.require_gate = False        # serve.require_gate=false: the old behaviour
        assert slots.promote("vox_lang", "ungated")["champion"] == "ungated"
    finally:
        slots.close()


def test_server_and_cli_refuse(good_run, ungated, tmp_path):
    os.environ["MENS_GATE_TEST_KEY"] = "k3y"
    try:
        with running_server(tmp_path, f"run={good_run[0]}", f"serve.adapters=['ungated={ungated}']",
                            "serve.api_key_env=MENS_GATE_TEST_KEY") as (url, proc):
            h = {"authorization": "Bearer k3y"}
            r = httpx.post(f"{url}/admin/promote", json={"spoke": "vox_lang", "slot": "ungated"},
                           headers=h)
            assert r.status_code == 409, r.text
            err = r.json()["error"]
            assert err["code"] == "gate_not_passed" and "has no gate.json" in err["message"]
            assert httpx.get(f"{url}/admin/aliases", headers=h).json()["aliases"]["vox_lang"][
                "champion"] == good_run[0].name
            cli = subprocess.run(
                [sys.executable, "-m", "mens.serve", "promote", "vox_lang", "ungated",
                 f"serve.port={url.rsplit(':', 1)[1]}", "serve.api_key_env=MENS_GATE_TEST_KEY",
                 f"hydra.run.dir={tmp_path / 'admin'}"], capture_output=True, text=True,
                timeout=120)
            assert cli.returncode == 3, cli.stderr
            assert "refused" in cli.stderr and "gate.json" in cli.stderr
            assert proc.poll() is None
    finally:
        os.environ.pop("MENS_GATE_TEST_KEY", None)


def test_a_key_on_the_command_line_is_refused(mens_cli, tmp_path):
    p = mens_cli("mens.serve", "serve.api_key=secret", f"hydra.run.dir={tmp_path / 'r'}")
    assert p.returncode == 2 and "serve.api_key_env=" in p.stderr and "export" in p.stderr
    assert not (tmp_path / "r").exists()          # refused before Hydra saved anything
    env = {k: v for k, v in os.environ.items() if k != "MENS_UNSET_KEY_VAR"}
    p = subprocess.run([sys.executable, "-m", "mens.serve", "serve.api_key_env=MENS_UNSET_KEY_VAR",
                        f"hydra.run.dir={tmp_path / 'u'}"], capture_output=True, text=True,
                       cwd=tmp_path, env=env, timeout=120)
    assert p.returncode == 2 and "MENS_UNSET_KEY_VAR" in p.stderr and "unset" in p.stderr
