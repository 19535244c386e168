"""One command pattern: every `mens <command>` (every entry of COMMANDS, every subcommand) and
every `python -m mens.X` shim goes through mens.cli.app — the same entry, the same one-line
error printer, the same exit codes. Cheap: each command gets a bad override and must exit 2 with
one paragraph before it does any work (no training, no server, no run dir)."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from mens.cli import COMMANDS, main
from mens.cli.app import command
from mens.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
BAD = "lane=lorax"   # an unknown option of a config group every command composes

# every command line shape users type: each COMMANDS entry with each of its subcommands
SHAPES = [["train"], ["plan"], ["export"], ["serve"], ["serve", "promote", "vox_lang"],
          ["serve", "rollback", "vox_lang"], ["serve", "aliases"], ["compare"], ["calibrate"],
          ["fit"], ["data", "inspect"], ["data", "tree", "expand"], ["data", "synth"],
          ["data", "curate", "list"], ["data", "push"], ["push"], ["demo"], ["cloud", "estimate"], ["cloud", "launch"],
          ["cloud", "catalog", "refresh"], ["recommend"], ["ladder"], ["eval"], ["gate"], ["afk"],
          ["afk", "status"], ["afk", "pause"], ["afk", "abort"], ["studio"],
          ["launch", "torchrun"], ["launch", "slurm"], ["launch", "kubeflow"]]


def one_error(err: str, code: int) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("mens: error")]
    assert len(lines) == 1 and lines[0].startswith(f"mens: error (exit {code}): "), err
    return lines[0]


def test_every_command_is_covered():
    assert {shape[0] for shape in SHAPES} == set(COMMANDS)


@pytest.mark.parametrize("shape", SHAPES, ids=" ".join)
def test_a_bad_override_exits_2_with_one_paragraph(shape, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)                     # whatever a command might write lands here
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    assert main([*shape, BAD]) == 2
    line = one_error(capsys.readouterr().err, 2)
    assert "lorax" in line and "lane=lora" in line   # explain's paragraph, with its hint
    assert not list(tmp_path.iterdir())             # refused before any work


@pytest.mark.parametrize("argv, words", [
    (["frobnicate"], ["unknown command", "mens --help"]),
    (["data"], ["`mens data` takes a subcommand", "inspect"]),
    (["data", "tree"], ["`mens data tree` takes an action", "expand"]),
    (["data", "curate", "frob"], ["`mens data curate` takes an action", "list"]),
    (["cloud", "frobnicate"], ["`mens cloud` takes a subcommand", "catalog refresh"]),
    (["launch", "frobnicate"], ["`mens launch` takes an engine", "kubeflow"]),
    (["serve", "serve.api_key=secret"], ["serve.api_key_env=", "export MENS_API_KEY"]),
])
def test_command_lines_mens_cannot_take_exit_2_the_same_way(argv, words, tmp_path, monkeypatch,
                                                           capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    assert main(argv) == 2
    line = one_error(capsys.readouterr().err, 2)
    assert all(w in line for w in words), line


def test_a_command_without_a_run_dir_has_the_same_outcomes(monkeypatch, capsys):
    """command() (mens data, afk, demo) handles what a Hydra app's outcome handling does."""
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    def raising(e):
        raise e
    assert command(raising, KeyboardInterrupt()) == 130
    assert capsys.readouterr().err.strip() == "mens: interrupted"
    assert command(raising, RuntimeError("disk on fire")) == 4
    assert "unexpected RuntimeError: disk on fire" in one_error(capsys.readouterr().err, 4)
    assert command(lambda code: code, 3) == 3
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")   # the user asks for the trace: it propagates
    with pytest.raises(RuntimeError):
        command(raising, RuntimeError("disk on fire"))
    with pytest.raises(ConfigError):
        main(["data", "inspect", BAD])


def shims() -> dict[str, Path]:
    files = [ROOT / "mens" / "__main__.py", ROOT / "mens" / "fit.py",
             *sorted((ROOT / "mens").glob("*/__main__.py"))]
    return {f.relative_to(ROOT).as_posix(): f for f in files}


@pytest.mark.parametrize("rel", list(shims()))
def test_every_python_m_shim_is_as_main_of_a_command(rel):
    """Each shim is its docstring, `from mens.cli import as_main`, `as_main(__name__, "X")`."""
    body = ast.parse(shims()[rel].read_text()).body
    assert isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    assert [ast.unparse(s) for s in body[1:-1]] == ["from mens.cli import as_main"], rel
    call = body[-1].value
    assert ast.unparse(call.func) == "as_main" and ast.unparse(call.args[0]) == "__name__", rel
    assert call.args[1].value in COMMANDS, rel
    assert len(body) == 3, rel


def test_the_shims_cover_every_command_but_demo():
    named = {ast.parse(f.read_text()).body[-1].value.args[1].value for f in shims().values()}
    assert named == set(COMMANDS) - {"demo"}   # demo: `make demo` (python -m mens.cli.demo)


def test_one_printer():
    """The error line and the interrupt line are printed in one place (mens.cli.app); others
    may read them (afk takes a child's error line for the item's reason)."""
    said = [f"{p.relative_to(ROOT)}:{node.lineno}" for p in sorted((ROOT / "mens").rglob("*.py"))
            for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("print", "sys.stderr.write")
            and any(w in ast.unparse(node) for w in ("mens: error", "mens: interrupted"))]
    assert [s.split(":")[0] for s in said] == ["mens/cli/app.py"] * 2, said
