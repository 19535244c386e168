"""No command in the docs that a test does not run (issue #42).

Every line of a ```bash / ```sh / ```console / ```shell block of README.md and docs/**/*.md (the
generated reference pages excepted) is a command. Each one is either run here — in this process
through `mens.cli.main` when it is cheap (a plan, an emitter, an estimate: what `mens X` and its
`python -m mens.X` shim both call), as a subprocess under `slow` when it trains, evaluates or
exports — with `<run dir>` standing for a tiny run made by the session, or it is named in BY_TEST
with the existing test that executes it, whose source must hold the given call.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHELL = {"bash", "sh", "console", "shell"}
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.M | re.S)
STARTS = ("mens ", "python -m mens", "make ", "pip ", "$ ")
# what the docs write for a path the reader has, as one shell word; the tests' stand-ins below
PLACEHOLDERS = {"<run dir>": "RUN_DIR", "<model dir>": "MODEL_DIR"}
MODEL_DIR = ROOT / "mens" / "assets" / "tiny"    # an HF model directory (the tiny rung's)


def doc_files() -> list[Path]:
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if "reference" not in p.parts)
    return [ROOT / "README.md", *docs]


def blocks():
    for path in doc_files():
        for lang, body in FENCE.findall(path.read_text(encoding="utf-8")):
            yield path, lang, body


def commands() -> dict[str, list[str]]:
    """{command as written, comment cut: [pages showing it]}."""
    found: dict[str, list[str]] = {}
    for path, lang, body in blocks():
        if lang not in SHELL:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            for ph, word in PLACEHOLDERS.items():
                line = line.replace(ph, word)
            words = shlex.split(line, comments=True)
            if words:
                cmd = shlex.join(words)
                found.setdefault(cmd, []).append(str(path.relative_to(ROOT)))
    return found


# Run elsewhere: {command: (test file, a call its source holds, why that is this command)}.
BY_TEST = {
    "make test": (".ci/run", "make test\n", "CI runs the suite exactly so"),
    "python -m mens rerun=RUN_DIR": (
        "tests/cli/test_cli.py", 'mens_cli("mens", f"rerun=', "a rerun of a tiny run"),
    "make calibrate-gpu": (
        "tests/calibrate/test_calibrate_gpu.py", '"calibrate-gpu"]',
        "without a CUDA device (exit 2); with one it is the 10-minute sitting"),
    "python -m mens.serve run=RUN_DIR": (
        "tests/serve_util.py", '[sys.executable, "-m", "mens.serve"',
        "the served tiny run every serve test talks to"),
    "python -m mens.serve promote vox_lang": (
        "tests/serve/test_serve.py", '"-m", "mens.serve", "promote", "vox_lang"',
        "promotion on a served run"),
    "mens cloud launch +rung=8b lane=full cloud.offer=vast:H200:2": (
        "tests/cloud/test_launch.py", 'cloud_cli("mens.cloud", "launch"',
        "sky.yaml from the checkout (from elsewhere a non-editable install is needed)"),
    # the default eval set and gate on the CLI take ~8 min each on this box: the same calls with
    # the tests' smaller sets run in the eval and gate suites
    "mens eval run=RUN_DIR": (
        "tests/eval/test_run.py", 'mens_cli("mens.eval", f"run={run}"',
        "the command on the session's tiny run, with the eval tests' small set (eval.max_prompts, k)"),
    "mens gate run=RUN_DIR": (
        "tests/gate/conftest.py", "gate(run, *DEFAULT_GATE)",
        "the default gate (gate_run, what the command calls) on a trained tiny run: test_gate_well"),
    "python -m mens +rung=smol": (
        "tests/source/test_smol_train.py", '"+rung=smol", *FAST_TRAIN',
        "the smol rung trained twice offline (dequantized, then reused) on a small chat file"),
    "mens plan +rung=gguf rung.path=model.gguf": (
        "tests/source/test_gguf_source.py", 'compile_run("+rung=gguf", "rung.path=little.gguf")',
        "the plan of a GGUF that gguf-py writes in the test"),
    "mens studio": ("tests/studio/conftest.py", '"-m", "mens.studio"', "the studio the browser tests drive"),
    "mens launch ray +hw=cpu hw.devices=2 launch.max_restarts=1": (
        "tests/launch/test_ray.py", '"ray"', "a local Ray cluster: one node, two ranks (slow)"),
}
for _what in ("tree expand", "synth"):
    BY_TEST[f"mens data {_what} spoke=mcp_tool_chain "
            + ("tree.depth=1 tree.branching=2 " if _what == "tree expand" else "synth.per_leaf=8 ")
            + "teacher=endpoint teacher.base_url=http://127.0.0.1:8089/v1 teacher.model=base "
              "teacher.api_key_env=MENS_API_KEY"] = (
        "tests/synth/test_tool_synth.py", f'main([{", ".join(map(repr, _what.split()))}'
        .replace("'", '"'), "the same subcommand against the stand-in teacher's URL")

# Exit codes other than 0, as the docs say them.
EXPECT = {
    "python -m mens +hw=m_series +rung=0.6b": 0 if sys.platform == "darwin" else 2,
    "mens plan +hw=rtx4090 +rung=32b lane=full": 3,
}
# Run as a subprocess under `slow`: they train, evaluate, export or calibrate for real.
SLOW = {
    "make run", "python -m mens", "python -m mens data=file data.path=train.jsonl",
    "mens compare run=RUN_DIR",
    "python -m mens.export run=RUN_DIR",
    "python -m mens.export run=RUN_DIR 'export.gguf=[f16,q8_0]' export.verify=true",
    "mens push run=RUN_DIR push.repo=me/tiny-vox push.dry_run=true",
    "python -m mens.calibrate lane=lora train.seq_len=128 train.micro_batch=1",
    # cheap, but 10-70 s each on a loaded 2-core box: kept out of the fast minute
    "mens recommend +hw=m_series hw.memory_gb=128", "mens ladder",
    "mens cloud estimate +rung=32b lane=qlora", "python -m mens.plan -m +hw=rtx4090,h100 +rung=4b,8b",
    "make calibrate-gpu 'ARGS=--dry-run --tier h200'",
} | ({"python -m mens +hw=m_series +rung=0.6b"} if sys.platform == "darwin" else set())
# (the user's command trains 0.6b on a Mac; elsewhere it exits 2 at once, saying how to plan)
# `python -m mens` is what `make run` runs (asserted from `make -n run` below).
ALIAS = {"python -m mens": "make run"}

ALL = commands()
FAST = sorted(c for c in ALL if c not in BY_TEST and c not in SLOW)


def test_every_shown_command_is_run_or_named():
    assert len(ALL) >= 30, ALL
    known = [c for c in ALL if c in BY_TEST or c in SLOW or c.startswith(("mens ", "python -m mens"))
]
    assert sorted(known) == sorted(ALL), f"no test runs: {sorted(set(ALL) - set(known))}"
    assert not set(BY_TEST) - set(ALL) and not SLOW - set(ALL), "a listed command left the docs"


@pytest.mark.parametrize("cmd", sorted(BY_TEST))
def test_the_named_test_runs_it(cmd):
    path, call, _ = BY_TEST[cmd]
    assert call in (ROOT / path).read_text(encoding="utf-8"), (cmd, path, call)


def test_no_command_hides_outside_a_shell_block():
    for path, lang, body in blocks():
        if lang in SHELL or lang == "python":
            continue
        hidden = [l for l in body.splitlines() if l.lstrip().startswith(STARTS)]
        assert not hidden, f"{path}: a ```{lang or '(plain)'} block shows commands: {hidden}"


def test_make_run_runs_python_m_mens():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # under `make test` this is a sub-make: without the parent's MAKEFLAGS/MAKELEVEL it prints
    # no "Entering directory" lines
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    out = subprocess.run(["make", "-n", "--no-print-directory", "-o", "install", "-f",
                          str(ROOT / "Makefile"), "PY=PY", "ARGS=", "run"], capture_output=True,
                         text=True, cwd=ROOT, env=env).stdout
    assert out.split() == ["PY", "-m", "mens"], out


# ---- running them

def _records(n: int, make) -> str:
    return "".join(json.dumps(make(i)) + "\n" for i in range(n))


def user_files(cwd: Path) -> None:
    """The files the docs' commands name, in the directory they run in."""
    chat = lambda i: {"messages": [{"role": "user", "content": f"What is {i} plus {i}?"},
                                   {"role": "assistant", "content": f"{i} plus {i} is {2 * i}."}]}
    (cwd / "train.jsonl").write_text(_records(48, chat))
    (cwd / "data").mkdir()
    (cwd / "data" / "a.jsonl").write_text(_records(24, chat))
    (cwd / "data" / "b.jsonl").write_text(_records(24, lambda i: chat(i + 100)))
    (cwd / "pairs.jsonl").write_text(_records(48, lambda i: {
        "prompt": f"Double {i}.", "chosen": f"{2 * i}", "rejected": f"{2 * i + 1}"}))
    (cwd / "labeled.jsonl").write_text(_records(48, lambda i: {
        "prompt": f"Double {i}.", "completion": f"{2 * i + i % 2}", "label": i % 2 == 0}))
    tool = {"type": "function", "function": {"name": "get_weather", "description": "the weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}}
    city = ["Oslo", "Lima", "Pune", "Kyiv"]
    (cwd / "tools.jsonl").write_text(_records(48, lambda i: {"tools": [tool], "messages": [
        {"role": "user", "content": f"Weather in {city[i % 4]} (#{i})?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function",
         "function": {"name": "get_weather", "arguments": json.dumps({"city": city[i % 4]})}}]},
        {"role": "tool", "tool_call_id": f"c{i}", "name": "get_weather", "content": "sunny"},
        {"role": "assistant", "content": f"Sunny in {city[i % 4]}."}]}))


def argv_of(cmd: str, run_dir: Path | None = None) -> list[str]:
    words = [w.replace("MODEL_DIR", str(MODEL_DIR)) for w in shlex.split(cmd)]
    if run_dir is not None:
        words = [w.replace("RUN_DIR", str(run_dir)) for w in words]
    if words[0] == "make":
        return ["make", "-s", "-o", "install", "-f", str(ROOT / "Makefile"),
                f"PY={sys.executable}", *words[1:]]
    if words[0] == "mens":
        return [sys.executable, "-c", "import sys; from mens.cli import main; sys.exit(main())",
                *words[1:]]
    assert words[:2] == ["python", "-m"], cmd
    return [sys.executable, *words[1:]]


@pytest.mark.parametrize("cmd", FAST)
def test_fast_command(cmd, tmp_path, monkeypatch, capsys):
    """Run in this process through the one entry point the command and its shim share."""
    from mens.cli import command_table, main

    user_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = argv_of(cmd)
    if argv[0] == "make":
        if shutil.which("make") is None:
            pytest.skip("make is not installed")
        p = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert p.returncode == EXPECT.get(cmd, 0), p.stderr
        return
    if argv[1] == "-m":
        module = argv[2]
        (name,) = [n for n, _, python_m in command_table() if module == python_m] or [None]
        assert name, f"{module} is no command's shim"
        args = argv[3:]
    else:
        name, args = argv[3], argv[4:]
    try:
        code = main([name, *args])
    except SystemExit as e:         # --help and friends exit through argparse/Hydra
        code = e.code or 0
    out = capsys.readouterr()
    assert code == EXPECT.get(cmd, 0), f"{cmd}: exit {code}\n{out.err[-3000:]}"


@pytest.fixture(scope="session")
def docs_run(tiny_run, tmp_path_factory):
    """A copy of the session's tiny run: commands below write into their run dir."""
    dst = tmp_path_factory.mktemp("docs_run") / tiny_run.name
    shutil.copytree(tiny_run, dst)
    return dst


@pytest.mark.slow
@pytest.mark.parametrize("cmd", sorted(SLOW))
def test_slow_command(cmd, docs_run, tmp_path):
    if ALIAS.get(cmd):
        pytest.skip(f"run as `{ALIAS[cmd]}` (test_make_run_runs_python_m_mens: the same command)")
    if cmd.startswith("make") and shutil.which("make") is None:
        pytest.skip("make is not installed")
    if "export.verify=true" in cmd:
        pytest.importorskip("llama_cpp", reason="export.verify needs llama-cpp-python (dev extra)")
    user_files(tmp_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    p = subprocess.run(argv_of(cmd, docs_run), cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=1800)
    assert p.returncode == EXPECT.get(cmd, 0), f"{cmd}: exit {p.returncode}\n{p.stderr[-3000:]}"
