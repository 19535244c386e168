"""Planning never needs bitsandbytes (issue #25): `mens plan` and `mens cloud estimate` plan
lane=qlora for another machine in an environment where bitsandbytes is not installed, and only a
run that trains here refuses (exit 2, naming it).

The environment is real: a folder of links to every entry of this venv's site-packages but
bitsandbytes (package and dist-info), made the only site directory of a `python -S` process (its
.pth files processed, so mens's editable install resolves as usual) — importlib finds neither the
module nor its metadata."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def no_bnb(tmp_path_factory) -> dict:
    site = Path(sysconfig.get_paths()["purelib"])
    if not any(site.glob("bitsandbytes*")):
        pytest.skip("bitsandbytes is not installed here: nothing to hide")
    env_site = tmp_path_factory.mktemp("site-without-bnb")
    for entry in site.iterdir():
        if not entry.name.lower().startswith("bitsandbytes"):
            (env_site / entry.name).symlink_to(entry)
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "PYTHONPATH")}
    env["MENS_TEST_SITE"] = str(env_site)
    return env


BOOT = ("import os, runpy, site, sys; site.addsitedir(os.environ['MENS_TEST_SITE']); "
        "sys.argv = sys.argv[1:]; runpy.run_module(sys.argv[0], run_name='__main__', "
        "alter_sys=True)")


def run(env: dict, cwd: Path, module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-S", "-c", BOOT, module, *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_the_environment_has_no_bitsandbytes(no_bnb, tmp_path):
    code = ("import os, site; site.addsitedir(os.environ['MENS_TEST_SITE'])\n"
            "import importlib.metadata as md, importlib.util as u\n"
            "assert u.find_spec('bitsandbytes') is None\n"
            "try:\n    md.version('bitsandbytes')\nexcept md.PackageNotFoundError:\n"
            "    print('absent')\n")
    res = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                         env=no_bnb, cwd=tmp_path, timeout=60)
    assert res.stdout.strip() == "absent", res.stderr


def test_plan_and_cloud_estimate_of_qlora_need_no_bitsandbytes(no_bnb, tmp_path):
    res = run(no_bnb, tmp_path, "mens.plan", "+hw=rtx4090", "+rung=8b", "lane=qlora")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "cannot train on this machine" in res.stdout + res.stderr
    res = run(no_bnb, tmp_path, "mens.cloud", "estimate", "+rung=8b", "lane=qlora")
    assert res.returncode == 0, res.stderr[-2000:]


def test_training_qlora_here_without_it_exits_2_naming_it(no_bnb, tmp_path):
    res = run(no_bnb, tmp_path, "mens", "+hw=cpu", "lane=qlora", "train.max_steps=1")
    assert res.returncode == 2, res.stdout[-1000:] + res.stderr[-2000:]
    assert "bitsandbytes is not installed" in res.stderr and "Traceback" not in res.stderr
