"""A check in mens is a raise, never an `assert`: `python -O` strips assert statements, so a
registry check or an input guard written as one is gone for whoever runs optimised (issue #37:
the objective registry's check at import, an afk control action, export's weight-fit guard).
Read statically (ast) over every module under mens/, and the registry check run under -O."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def asserts(tree_root: Path) -> list[str]:
    """'file:line' of every assert statement under tree_root/mens."""
    out = []
    for path in sorted((tree_root / "mens").rglob("*.py")):
        rel = path.relative_to(tree_root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        out += [f"{rel}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Assert)]
    return out


def test_no_module_of_mens_checks_with_assert():
    found = asserts(ROOT)
    assert not found, "checks written as `assert` vanish under python -O; raise instead:\n  " + \
        "\n  ".join(found)


def test_the_rule_can_fail(tmp_path):
    (tmp_path / "mens").mkdir()
    (tmp_path / "mens" / "a.py").write_text("def f(x):\n    assert x, 'no'\n    return x\n")
    assert asserts(tmp_path) == ["mens/a.py:2"]


def test_the_objective_registry_check_holds_under_python_O():
    """A schema objective without a card is refused at import, also with -O."""
    code = ("import mens.config.schema as s\n"
            "s.OBJECTIVES = (*s.OBJECTIVES, 'ppo')\n"
            "try:\n"
            "    import mens.config.objectives\n"
            "except RuntimeError as e:\n"
            "    print('refused:', e)\n"
            "else:\n"
            "    print('imported')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONOPTIMIZE"}
    p = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("refused:") and "ppo" in p.stdout, p.stdout
