"""Where mens finds what it ships — read-only, found through importlib.resources so that an
installed wheel works from any directory:

    mens.conf      ← conf/         config groups, the primary config, the memory contract
    mens.recipes   ← recipes/      named recipes (`+recipe=NAME`)
    mens.evidence  ← calibration/  calibration records and report (evidence, not config)
    mens/assets/   tiny/ (the embedded rung) and corpora/<spoke>/ (the shipped corpora)

pyproject.toml maps the three top-level folders into these packages at build time (no
symlinks). Nothing here is ever written to: a refitted contract goes to a user path
(`plan.contract=`, `calibrate.out=`). A user's own option files and recipes sit in `./conf`
of the working directory, which every command also searches (USER_CONF).
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def _package_dir(package: str) -> Path:
    return Path(str(files(package)))


# The distribution's name (the import name and the `mens` command stay `mens`): PyPI's `mens` is
# an unrelated project, so nothing may install mens by that name.
DIST = "mens-compiler"
CONF_DIR = _package_dir("mens.conf")
RECIPES_DIR = _package_dir("mens.recipes")
EVIDENCE_DIR = _package_dir("mens.evidence")
ASSETS = Path(__file__).resolve().parent / "assets"
CORPORA = ASSETS / "corpora"
CONTRACT = CONF_DIR / "contract.yaml"
CPU_RECORDS = EVIDENCE_DIR / "cpu.jsonl"
USER_CONF = Path("conf")          # relative: the working directory's own conf/
# True when mens runs from a source checkout (editable install): conf/ is the repository's, and
# `make fit` may rewrite the shipped contract there. An installed package is never written to.
SOURCE_CHECKOUT = (CONF_DIR.parent / "pyproject.toml").is_file()


def option_names(group: str, user: bool = False) -> list[str]:
    """The shipped options of a config group (recipes included), sorted; with `user`, the
    user's own ./conf/<group>/ options too (every hw tier, for the tables built from them)."""
    folder = RECIPES_DIR if group == "recipe" else CONF_DIR / group
    names = {p.stem for p in folder.glob("*.yaml")}
    if user:
        names |= {p.stem for p in (USER_CONF / group).glob("*.yaml")}
    return sorted(names)


def option_path(group: str, name: str) -> Path:
    """A group option's YAML: the shipped one, else the user's ./conf/<group>/NAME.yaml (the
    order Hydra's search path gives them)."""
    shipped = (RECIPES_DIR if group == "recipe" else CONF_DIR / group) / f"{name}.yaml"
    user = USER_CONF / group / f"{name}.yaml"
    return user if not shipped.is_file() and user.is_file() else shipped
