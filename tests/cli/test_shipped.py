"""What the wheel ships: every package under mens/ (and nothing of tools/), and no import of a
package that only the dev extra installs (`pip install mens` would not have it: a user's
ImportError). TRL is the case in point: `make bench` measures mens against it, from
tools/bench/, which does not ship.

Read statically (ast) and from pyproject.toml through setuptools' own reader; an import name's
distribution from the installed packages' metadata (importlib.metadata). A package mens imports
is declared in the main dependencies, even where another dependency happens to pull it in (httpx
came through wandb alone). A self-test runs the same check on a fake tree that breaks it.
"""
from __future__ import annotations

import ast
import glob
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from setuptools.config.pyprojecttoml import read_configuration

ROOT = Path(__file__).resolve().parents[2]
# Dev-extra packages that shipped code may import anyway, each behind a loud check, and why.
OPTIONAL = {
    "llama-cpp-python": "export's K-quant types and export.verify: checked before any work "
                        "(mens.export.gguf.require_llama_cpp, mens.export.build) with exit 2 and "
                        "the pip command that installs it",
    "ray": "`mens launch ray` alone imports it, when a run starts; its absence is exit 2 with the "
           "pip command, checked before the plan (mens.launch.ray.prepare)",
}


def imported_names(tree_root: Path) -> dict[str, list[str]]:
    """Top-level name imported -> ['file:line', ...] for every absolute import under
    tree_root/mens (module level and inside functions; importlib.import_module('literal'))."""
    out: dict[str, list[str]] = {}
    for path in sorted((tree_root / "mens").rglob("*.py")):
        rel = path.relative_to(tree_root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
                    node.func, "id", None)) == "import_module" and node.args and isinstance(
                    node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                names = [node.args[0].value]
            else:
                continue
            for name in names:
                out.setdefault(name.split(".")[0], []).append(f"{rel}:{node.lineno}")
    return out


def violations_dev_only(imports: dict[str, list[str]], dependencies: list[str], dev: list[str],
                        optional: dict[str, str]) -> list[str]:
    """shipped code imports no package that only the dev extra installs (but `optional` ones)"""
    names = lambda reqs: {canonicalize_name(Requirement(r).name) for r in reqs}  # noqa: E731
    dev_only = names(dev) - names(dependencies) - set(optional)
    owners = metadata.packages_distributions()   # import name -> distributions providing it
    return [f"{where}: import {name} ({dist}: dev extra only)"
            for name, places in sorted(imports.items())
            for dist in sorted({canonicalize_name(d) for d in owners.get(name, [name])} & dev_only)
            for where in places]


@pytest.fixture(scope="module")
def project() -> dict:
    return read_configuration(ROOT / "pyproject.toml")


def test_no_shipped_module_imports_a_dev_only_package(project):
    p = project["project"]
    found = violations_dev_only(imported_names(ROOT), p["dependencies"],
                                p["optional-dependencies"]["dev"], OPTIONAL)
    assert not found, "shipped code imports what only `pip install mens[dev]` has:\n  " + \
        "\n  ".join(found)


def test_the_wheel_lists_every_package_and_no_tool(project):
    listed = set(project["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "mens").rglob("__init__.py")}
    assert on_disk - listed == set(), "packages under mens/ missing from pyproject's packages"
    assert all(p == "mens" or p.startswith("mens.") for p in listed)
    assert not (ROOT / "mens" / "cli" / "bench.py").exists() and \
        (ROOT / "tools" / "bench" / "bench.py").is_file()   # make bench runs it from there


def test_the_wheel_ships_every_studio_static_file(project):
    """The studio's page, its scripts and the vendored uPlot (static/vendor/uplot/: no CDN) match
    mens.studio's package-data globs, expanded as setuptools expands them (recursive glob);
    tests/cli/test_install.py finds them in a built wheel (slow)."""
    here = ROOT / "mens" / "studio"
    globs = project["tool"]["setuptools"]["package-data"]["mens.studio"]
    shipped = {f for g in globs for f in glob.glob(g, root_dir=here, recursive=True)
               if (here / f).is_file()}
    on_disk = {p.relative_to(here).as_posix() for p in (here / "static").rglob("*") if p.is_file()}
    assert {"static/index.html", "static/vendor/uplot/uPlot.iife.min.js",
            "static/vendor/uplot/uPlot.min.css", "static/vendor/uplot/LICENSE"} <= on_disk
    assert on_disk - shipped == set(), "studio files the wheel would not carry"


def test_the_dev_only_rule_can_fail(tmp_path):
    fake = {"a.py": "def f():\n    from trl import SFTTrainer\n",        # lazy, still counts
            "b.py": "import httpx\n",        # dev extra and a main dependency: shipped
            "c.py": "import llama_cpp\n",    # optional (OPTIONAL's reason)
            "d.py": "import importlib\nimportlib.import_module('pytest')\n",
            "e.py": "from . import a\nimport yaml\n"}
    for name, text in fake.items():
        (tmp_path / "mens").mkdir(exist_ok=True)
        (tmp_path / "mens" / name).write_text(text)
    found = violations_dev_only(imported_names(tmp_path), ["httpx>=0.27", "PyYAML"],
                                ["trl", "httpx", "llama-cpp-python", "pytest"], OPTIONAL)
    assert found == ["mens/d.py:2: import pytest (pytest: dev extra only)",
                     "mens/a.py:2: import trl (trl: dev extra only)"], found
