"""One command pattern: every `mens <command>` (every entry of COMMANDS, every subcommand) and
every `python -m mens.X` module goes through mens.cli.app — the same entry, the same one-line
error printer, the same exit codes. Cheap: each command gets a bad override and must exit 2 with
one paragraph before it does any work (no training, no server, no run dir)."""
from __future__ import annotations

import ast
import importlib
import importlib.util
import runpy
import sys
from pathlib import Path

import pytest

from mens.cli import COMMANDS, command_table, main
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


def module_of(rel: str) -> str:
    """mens/plan/__main__.py -> mens.plan (what `python -m` is given); mens/fit.py -> mens.fit"""
    return rel.removesuffix(".py").removesuffix("/__main__").replace("/", ".")


@pytest.mark.parametrize("rel", list(shims()))
def test_every_python_m_shim_is_the_same_two_lines(rel):
    """Each shim is a docstring, `from mens.cli import as_main`, `as_main(__spec__, __name__)`:
    which command it runs is declared in COMMANDS alone; importing it runs nothing."""
    body = ast.parse(shims()[rel].read_text()).body
    assert isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    assert [ast.unparse(s) for s in body[1:]] == ["from mens.cli import as_main",
                                                  "as_main(__spec__, __name__)"], rel
    importlib.import_module(module_of(rel) + ("" if rel == "mens/fit.py" else ".__main__"))


def test_each_command_is_one_declaration():
    """The shims are exactly the declared `python -m` modules that are not a main themselves;
    one that is (mens.cli.demo) runs its main under __main__; no package holds only a shim."""
    own = {c.python_m for c in COMMANDS.values() if c.python_m == c.main}
    assert {module_of(rel) for rel in shims()} == \
        {c.python_m for c in COMMANDS.values()} - own
    for module in own:
        assert 'if __name__ == "__main__":' in importlib.util.find_spec(module).loader.get_source(
            module)
    for rel in shims():
        if rel.endswith("/__main__.py") and rel != "mens/__main__.py":
            beside = {p.name for p in (ROOT / rel).parent.glob("*.py")}
            assert beside - {"__init__.py", "__main__.py"}, f"{rel}: a package of a shim alone"
    assert [row[0] for row in command_table()] == list(COMMANDS)
    assert all(len(row) == 3 and row[1] and row[2] for row in command_table())


@pytest.mark.parametrize("module", ["mens.plan", "mens.fit", "mens.recommend"])
def test_a_python_m_module_runs_its_command(module, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [module, BAD])
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    run = module if module == "mens.fit" else module + ".__main__"
    monkeypatch.delitem(sys.modules, run, raising=False)   # as a fresh `python -m` finds it
    with pytest.raises(SystemExit) as e:
        runpy.run_module(run, run_name="__main__")
    assert e.value.code == 2 and "lorax" in one_error(capsys.readouterr().err, 2)


@pytest.mark.parametrize("group, words", [("launch", ["torchrun", "slurm", "kubeflow", "ray"]),
                                          ("cloud", ["estimate", "catalog refresh"]),
                                          ("data", ["inspect", "curate"])])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_on_a_command_group_prints_its_help_and_exits_0(group, words, flag, tmp_path,
                                                              monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([group, flag]) == 0
    out, err = capsys.readouterr()
    assert all(w in out for w in words) and not err, (out, err)
    assert not list(tmp_path.iterdir())


def test_one_printer():
    """The error line and the interrupt line are printed in one place (mens.cli.app); others
    may read them (afk takes a child's error line for the item's reason)."""
    said = [f"{p.relative_to(ROOT)}:{node.lineno}" for p in sorted((ROOT / "mens").rglob("*.py"))
            for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("print", "sys.stderr.write")
            and any(w in ast.unparse(node) for w in ("mens: error", "mens: interrupted"))]
    assert [s.split(":")[0] for s in said] == ["mens/cli/app.py"] * 2, said
