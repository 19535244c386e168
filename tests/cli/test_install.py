"""The package as a user installs it: a non-editable wheel, used from an empty directory.

The wheel must carry everything mens reads at run time (conf/, recipes/, calibration/ mapped
into packages; assets/) and find it through importlib.resources — never through the source
checkout. The wheel goes into a fresh venv whose only other path is the dev venv's
site-packages (for torch & co.); the checkout's editable finder is not on it, and each test
asserts which mens answered.
"""
from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow   # builds a wheel; the training test trains the tiny rung


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python of a fresh venv holding the built wheel, its site-packages, the wheel)."""
    tmp = tmp_path_factory.mktemp("install")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp / "wheel"), str(ROOT)], check=True, capture_output=True)
    wheel = next((tmp / "wheel").glob("mens_compiler-*.whl"))
    venv.EnvBuilder(with_pip=False).create(tmp / "v")
    py = tmp / "v" / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # the dependencies (torch, lightning, hydra …) from the dev venv: a plain path entry, so the
    # checkout's editable finder (a .pth there) is never executed
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(site), str(wheel)], check=True, capture_output=True)
    return py, site, wheel


def run(py: Path, site: Path, cwd: Path, *args: str, timeout: int = 120):
    return subprocess.run([str(py), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={"PATH": "/usr/bin:/bin", "HOME": str(cwd),
                                                "WANDB_MODE": "offline"})


def test_the_wheel_carries_what_mens_reads_at_run_time(installed):
    import zipfile

    names = zipfile.ZipFile(installed[2]).namelist()
    for want in ("mens/conf/mens.yaml", "mens/conf/contract.yaml", "mens/conf/hw/h200.yaml",
                 "mens/conf/hydra/launcher/mens_slurm.yaml", "mens/recipes/tiny_smoke.yaml",
                 "mens/evidence/cpu.jsonl", "mens/assets/tiny/model.safetensors",
                 "mens/assets/corpora/vox_lang/eval.jsonl", "mens/cli/__init__.py",
                 "mens/studio/static/index.html",     # the page and its charting library, no CDN
                 "mens/studio/static/vendor/uplot/uPlot.iife.min.js",
                 "mens/studio/static/vendor/uplot/uPlot.min.css",
                 "mens/studio/static/vendor/uplot/LICENSE"):
        assert want in names, want
    assert not [n for n in names if n.startswith(("tools/", "tests/", "mens/tools"))]
    assert not [n for n in names if n.endswith("make_corpus.py")]   # build-time tools stay out


def test_plan_from_an_empty_directory(installed, tmp_path):
    py, site, _ = installed
    where = run(py, site, tmp_path, "-c", "import mens, mens.resources as r; "
                "print(mens.__file__); print(r.CONF_DIR); print(r.SOURCE_CHECKOUT)")
    mod, conf, checkout = where.stdout.split()
    assert mod.startswith(str(site)) and conf.startswith(str(site)) and checkout == "False"
    ok = run(py, site, tmp_path, "-m", "mens.plan", "+hw=h200", "+rung=0.6b")
    assert ok.returncode == 0, ok.stderr
    assert list((tmp_path / "outputs").glob("*/*_plan/plan.json"))
    script = site / "bin" / "mens"     # the [project.scripts] entry, run by the venv's python
    refused = run(py, site, tmp_path, str(script), "plan", "+hw=cpu", "hw.memory_gb=1", "+rung=8b")
    assert refused.returncode == 3, refused.stderr
    listed = run(py, site, tmp_path, str(script), "--help")
    assert listed.returncode == 0 and "calibrate" in listed.stdout and "fit" in listed.stdout
    recipe = run(py, site, tmp_path, "-m", "mens.plan", "+recipe=tiny_smoke", "+hw=h200")
    assert recipe.returncode == 0, recipe.stderr


def test_fit_never_writes_into_the_installed_package(installed, tmp_path):
    py, site, _ = installed
    before = (site / "mens" / "conf" / "contract.yaml").read_bytes()
    refused = run(py, site, tmp_path, "-m", "mens.fit")
    assert refused.returncode == 2 and "calibrate.out" in refused.stderr, refused.stderr
    mine = run(py, site, tmp_path, "-m", "mens.fit", "calibrate.out=mine.yaml")
    assert mine.returncode == 0, mine.stderr       # the shipped evidence, refitted into mine.yaml
    assert (tmp_path / "mine.yaml").is_file()
    assert (site / "mens" / "conf" / "contract.yaml").read_bytes() == before


def test_train_from_an_empty_directory(installed, tmp_path):
    py, site, _ = installed
    p = run(py, site, tmp_path, "-m", "mens", "logger=csv", "train.max_steps=2",
            "train.seq_len=256", "train.global_batch=4", "curriculum=flat",
            "train.eval_max_records=4", timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    summary = next((tmp_path / "outputs").glob("*/*_train/summary.json"))
    assert json.loads(summary.read_text())["steps"] == 2


def _fresh_site(tmp: Path, wheel: Path) -> tuple[Path, Path]:
    """(python, site-packages) of a fresh venv holding `wheel`, deps from the dev venv."""
    venv.EnvBuilder(with_pip=False).create(tmp)
    py = tmp / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], check=True, capture_output=True,
                               text=True).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(site), str(wheel)], check=True, capture_output=True)
    return py, site


def test_cloud_launch_ships_the_installed_mens_as_a_wheel(installed, tmp_path):
    """Outside a checkout, `mens cloud launch` ships a wheel of the very mens installed (never
    a name looked up on an index: PyPI's `mens` is another project), SkyPilot parses the task,
    the secrets go by name only, and the shipped wheel installs and plans in a fresh venv."""
    import yaml

    from cloud.test_launch import sky_parse

    py, site, _ = installed
    work = tmp_path / "empty"
    work.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "WANDB_MODE": "offline",
           "HF_TOKEN": "hf_test_value_never_written"}
    # the [project.scripts] entry, run by the fresh venv's python (as in the test above)
    res = subprocess.run([str(py), str(site / "bin" / "mens"), "cloud", "launch", "+rung=8b",
                          "lane=qlora"], cwd=work, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    sky = next(work.glob("outputs/*/*/sky.yaml"))
    text = sky.read_text()
    task = yaml.safe_load(text)
    setup = task["setup"]
    assert "mens_compiler-" in setup and ".whl[slurm]" in setup and "-e ." not in setup
    assert "mens[" not in setup and "pip install mens" not in setup
    shipped = {k: Path(v) for k, v in task["file_mounts"].items() if k.endswith(".whl")}
    (remote, wheel), = shipped.items()
    assert remote.startswith("~/mens/wheel/") and wheel.is_file() and wheel.parent.parent == \
        sky.parent
    assert task["secrets"] == {"HF_TOKEN": None} and "hf_test_value" not in text
    assert "--secret HF_TOKEN" in res.stdout
    parsed = sky_parse(sky)
    assert remote in parsed["file_mounts"]
    # the shipped wheel, installed alone into another fresh venv, plans from an empty dir
    py2, site2 = _fresh_site(tmp_path / "v2", wheel)
    ok = run(py2, site2, work, "-c", "import mens; print(mens.__file__)")
    assert ok.stdout.strip().startswith(str(site2)), ok.stdout + ok.stderr
    plan = run(py2, site2, work, "-m", "mens.plan", "+hw=h200", "+rung=0.6b")
    assert plan.returncode == 0, plan.stderr[-2000:]
