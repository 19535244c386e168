"""Event names are spelled once (issue #24): mens/run/telemetry.py is the only Python module with
an event name as a string literal, and the studio's scripts hold none (the page asks the server,
`/api/telemetry`). Read statically — Python with ast, JavaScript's string literals with a
tokenizing regex — and each check is shown failing on a fake tree first."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from mens.run.telemetry import Event

ROOT = Path(__file__).resolve().parent.parent.parent
MENS = ROOT / "mens"
OWNER = MENS / "run" / "telemetry.py"
NAMES = {e.value for e in Event}
# a JS string literal ('…', "…" or `…`, escapes honoured), or a // comment to pass over
JS_TOKEN = re.compile(r"""//[^\n]*|/\*.*?\*/|(["'`])((?:\\.|(?!\1)[^\\])*)\1""", re.S)


def python_literals(root: Path, allowed: set[Path]) -> list[str]:
    """`file:line: 'NAME'` for every str constant equal to an event name outside `allowed`
    (an f-string's constant parts count too; a docstring naming an event among other words
    does not: it is not the name alone)."""
    out = []
    for f in sorted(root.rglob("*.py")):
        if f in allowed:
            continue
        found = sorted((node.lineno, node.value) for node in ast.walk(ast.parse(f.read_text()))
                       if isinstance(node, ast.Constant) and node.value in NAMES)
        out += [f"{f.relative_to(root)}:{line}: {name!r}" for line, name in found]
    return out


def js_literals(root: Path, allowed: set[Path] = frozenset()) -> list[str]:
    out = []
    for f in sorted(root.glob("*.js")):
        if f in allowed:
            continue
        text = f.read_text()
        for m in JS_TOKEN.finditer(text):
            if m.group(1) and m.group(2) in NAMES:
                out.append(f"{f.name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(2)!r}")
    return out


def test_event_names_are_literals_only_in_the_vocabulary_module():
    assert python_literals(MENS, {OWNER}) == []
    assert len(python_literals(OWNER.parent, set())) == len(NAMES)   # each spelled once there


def test_the_studio_scripts_name_no_event():
    static = MENS / "studio" / "static"
    assert list(static.glob("*.js"))
    assert js_literals(static) == []
    assert '"/api/telemetry"' in (static / "app.js").read_text()


def test_the_python_scan_fails_on_a_literal(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ok.py").write_text('"""Writes TRAIN_STEP rows."""\nX = "train_step"\n')
    (tmp_path / "pkg" / "bad.py").write_text(
        'def f(tel, r):\n    tel.emit("TRAIN_STEP")\n    return r["event"] in ("EVAL",)\n'
        'g = f"{1}CHECKPOINT"\n')
    assert python_literals(tmp_path, set()) == [
        "pkg/bad.py:2: 'TRAIN_STEP'", "pkg/bad.py:3: 'EVAL'", "pkg/bad.py:4: 'CHECKPOINT'"]
    assert python_literals(tmp_path, {tmp_path / "pkg" / "bad.py"}) == []


def test_the_js_scan_fails_on_a_literal(tmp_path):
    (tmp_path / "a.js").write_text(
        '// a TRAIN_STEP row\nconst x = "waiting for TRAIN_STEP rows";\n'
        "if (r.event === 'CHECKPOINT') go(`EVAL`);\nconst y = \"a\\\"TRAIN_START\";\n")
    assert js_literals(tmp_path) == ["a.js:3: 'CHECKPOINT'", "a.js:3: 'EVAL'"]
    assert js_literals(tmp_path, {tmp_path / "a.js"}) == []
