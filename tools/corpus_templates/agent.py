"""agent_harness: coding-agent transcripts — plan, act with tools, observe, recover. Tool results
are consistent with the simulated repository: file contents are the bug bank's real source,
and test output comes from running the buggy and fixed code (agent_bugs). Tool use is kept as
structure (the record's `tools`, assistant `tool_calls`, `tool` turns answering them by id), so
each model family's chat template writes it in its own syntax."""
from __future__ import annotations

from .agent_bugs import BUGS, MODULES, case, pytest_fail, pytest_pass
from .common import act, fn, msg, schema, tool_record

HARNESS = [
    "You are a coding agent in a repository. Work in small steps: look before you change, "
    "run the tests after every edit, and finish with a short summary of what changed and why.",
    "Coding agent. Use the tools to inspect and modify the repo; never claim a test passes "
    "without running it. Keep edits minimal.",
    "You operate a developer workstation through tools. Plan briefly, act, read the output, "
    "and recover from failed steps instead of repeating them.",
]
TOOLS = [schema("run", "Run a shell command in the repo root.", {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
    schema("read_file", "Read a file.", {"type": "object",
                                         "properties": {"path": {"type": "string"}},
                                         "required": ["path"]}),
    schema("edit_file", "Replace one exact occurrence of `old` with `new`.", {
        "type": "object", "properties": {"path": {"type": "string"}, "old": {"type": "string"},
                                         "new": {"type": "string"}},
        "required": ["path", "old", "new"]}),
    schema("search", "Search the repo for a regex.", {
        "type": "object", "properties": {"pattern": {"type": "string"}},
        "required": ["pattern"]})]
RUNNERS = ["python -m pytest -q", "python -m pytest -q -x", "python -m pytest -q --tb=short",
           "python -m pytest -q -ra", "python -m pytest -q --maxfail=1",
           "python -m pytest -q -p no:randomly"]
PKGS = ["tally", "ledgerly", "quill", "orbitkit", "parcel", "beacon", "sprocket", "harbor",
        "lumen", "cobble", "fathom", "wicket", "juniper", "marlin", "tundra"]


def ticket(c):
    """Real requests carry a ticket reference; it also keeps otherwise equal prompts apart."""
    return f"[{c.choice(['OPS', 'DEV', 'CORE', 'PLAT', 'QA'])}-{c.randint(100, 9999)}] "


def system(c):
    """The harness prompt; the tools are the record's `tools` (the chat template writes them)."""
    return msg("system", c.choice(HARNESS))


def call(name, **args):
    return fn(name, args)


def record(msgs, difficulty, phase, strategy):
    return tool_record(msgs, TOOLS, difficulty, phase, strategy)


def repo(c):
    pkg = c.pick(PKGS)
    name = c.pick(sorted(BUGS))          # eval transcripts fix bugs no training one shows
    mod = MODULES[name]
    return pkg, name, f"src/{pkg}/{mod}.py", f"tests/test_{mod}.py", f"test_{name}_{c.pick(['edge', 'basic', 'regression', 'example', 'case', 'known'])}"


def look(c):
    pkg, name, path, test_file, _ = repo(c)
    bug = BUGS[name]
    fn = bug["src"].split("def ", 1)[1].split("(")[0]
    msgs = [system(c), msg("user", ticket(c) + c.pick([f"What does `{fn}` in {path} do?",
                                           f"Explain {path} to me briefly.",
                                           f"Summarise the function in {path}."])),
            act("", call("read_file", path=path)),
            msg("tool", bug["src"]),
            msg("assistant", f"`{path}` defines `{fn}`. " + c.pick([
                f"Note: {bug['why']} — worth a test.", f"One thing looks wrong: {bug['why']}.",
                f"It has a likely defect: {bug['why']}."]))]
    d = c.choice([1, 2, 3])
    return record(msgs, d, "warmup" if d <= 2 else "syntax", "look")


def run_tests(c):
    pkg, name, path, test_file, test = repo(c)
    bug, call_, got, want, _ = case(c, name)
    passed = c.randint(1, 9)
    out = pytest_fail(test_file, test, call_, got, want, passed)
    msgs = [system(c), msg("user", ticket(c) + c.pick([
        f"Run {pkg}'s test suite and tell me what fails.", f"Are the {pkg} tests green?",
        f"Status of the tests in {pkg}?", f"Quick check: does {pkg} pass its tests?",
        f"Run the {pkg} tests, report only.", f"What's failing in {pkg} right now?"])),
            act("", call("run", command=c.pick(RUNNERS))),
            msg("tool", out),
            msg("assistant", f"{passed} passed, 1 failed: `{test}` in {test_file} — "
                             f"`{call_}` returned {got!r}, expected {want!r}. " + c.pick([
                                 "I haven't changed anything; want me to fix it?",
                                 "Nothing edited yet — shall I fix it?",
                                 "Report only, as asked: no files touched. Fix next?"]))]
    return record(msgs, 4, "syntax", "run_tests")


def module_text(c, name: str) -> str:
    """The file as read: the buggy function, and sometimes the module's other (correct)
    helpers around it, as real modules have — long reads are part of real transcripts."""
    if not c.chance(0.3):
        return BUGS[name]["src"]
    others = [BUGS[o]["src"].replace(BUGS[o]["old"], BUGS[o]["new"])
              for o in c.rng.sample(sorted(set(BUGS) - {name}), c.randint(2, 5))]
    parts = others[:1] + [BUGS[name]["src"]] + others[1:]
    imports = sorted({line for p in parts for line in p.split("\n") if line.startswith("import ")})
    body = "\n\n".join("\n".join(l for l in p.split("\n") if not l.startswith("import "))
                        .strip("\n") + "\n" for p in parts)
    return ("\n".join(imports) + "\n\n\n" if imports else "") + body


def fix(c, recover: str | None = None):
    pkg, name, path, test_file, test = repo(c)
    bug, call_, got, want, fixed = case(c, name)
    passed = c.randint(1, 9)
    msgs = [system(c), msg("user", ticket(c) + c.pick([
        f"`{test}` is failing in {pkg}, please fix it.", f"CI is red on {pkg}'s unit tests "
        f"({test_file}). Fix it.", f"Fix the failing test in {pkg} ({test}).",
        f"{pkg}: {test_file} fails since yesterday. Can you fix it?",
        f"Something broke `{test}` ({pkg}). Please repair.",
        f"Make {pkg}'s tests green again; {test_file} is the red one."]))]
    runner = c.pick(RUNNERS)
    first = runner if recover != "no_pytest" else runner.replace("python -m ", "")
    msgs += [act(c.pick(["Reproducing first.", "Let me run the tests.",
                         "Starting with the failing run."]), call("run", command=first))]
    if recover == "no_pytest":
        msgs += [msg("tool", "bash: pytest: command not found\n(exit 127)"),
                 act(c.pick([
                     "No `pytest` on PATH; the venv's interpreter can run it as a module.",
                     "`pytest` isn't installed as a script here, but `python -m pytest` works "
                     "from the project interpreter.", "Command not found: falling back to "
                     "running pytest through python."]), call("run", command=runner))]
    msgs += [msg("tool", pytest_fail(test_file, test, call_, got, want, passed)),
             act(f"`{call_}` gives {got!r}, not {want!r}. Reading the code.",
                 call("read_file", path=path)),
             msg("tool", module_text(c, name))]
    old = bug["old"]
    if recover == "edit_miss":
        sloppy = old.replace("    ", "  ", 1)
        msgs += [act(f"The bug: {bug['why']}.",
                     call("edit_file", path=path, old=sloppy, new=bug["new"])),
                 msg("tool", f"error: `old` not found in {path} (0 matches)"),
                 act(c.pick([
                     "My `old` text had the wrong indentation; the file uses four spaces. "
                     "Retrying with the exact line.", "Zero matches: I typed two-space "
                     "indentation, the source has four. Copying the line verbatim now.",
                     "The replace failed on whitespace (2 vs 4 spaces). Using the exact text "
                     "from the file."]),
                     call("edit_file", path=path, old=old, new=bug["new"]))]
    else:
        msgs += [act(f"The bug: {bug['why']}.",
                     call("edit_file", path=path, old=old, new=bug["new"]))]
    msgs += [msg("tool", f"edited {path} (1 replacement)"),
             act("", call("run", command=runner)),
             msg("tool", pytest_pass(passed + 1)),
             msg("assistant", f"Fixed `{path}`: {bug['why']}. `{old.strip()}` → "
                              f"`{bug['new'].strip()}`. All {passed + 1} tests pass.")]
    d = 6 if recover is None else 8 if recover == "edit_miss" else 7
    return record(msgs, d, "tool_call" if recover is None else "agentic" if d == 8 else "tool_call",
                  f"fix_{recover or 'direct'}")


def fix_two(c):
    """Two independent failures in one package: fix, re-run, fix the second, re-run."""
    pkg = c.pick(PKGS)
    first, second = c.rng.sample(c.part(sorted(BUGS)), 2)
    runner, passed = c.pick(RUNNERS), c.randint(4, 12)
    cases = [(n, MODULES[n], *case(c, n)) for n in (first, second)]
    tests = [f"test_{n}_{c.pick(['edge', 'basic', 'regression', 'example', 'case', 'known'])}"
             for n in (first, second)]
    both = "\n".join(pytest_fail(f"tests/test_{m}.py", t, call_, got, want, passed).split(
        "\n1 failed")[0] for (n, m, _, call_, got, want, _), t in zip(cases, tests))
    msgs = [system(c), msg("user", ticket(c) + c.pick([
        f"{pkg}'s suite has been red for a while. Get it green.", f"Several {pkg} tests fail; "
        f"fix them all, one commit's worth.", f"Make every test in {pkg} pass again."])),
            act("", call("run", command=runner)),
            msg("tool", both + f"\n2 failed, {passed} passed in {(passed + 3) / 100:.2f}s")]
    for k, ((n, m, bug, call_, got, want, _), t) in enumerate(zip(cases, tests)):
        path = f"src/{pkg}/{m}.py"
        msgs += [act(c.pick(["Two unrelated failures; taking them in order.",
                             "Two failures in different modules. First one:",
                             "Separate causes, separate fixes. Starting with"]) + f" `{t}`."
                     if k == 0 else f"Now `{t}`.", call("read_file", path=path)),
                 msg("tool", module_text(c, n)),
                 act(f"`{call_}` gives {got!r}, expected {want!r}: {bug['why']}.",
                     call("edit_file", path=path, old=bug["old"], new=bug["new"])),
                 msg("tool", f"edited {path} (1 replacement)"),
                 act("", call("run", command=runner))]
        if k == 0:
            rest = pytest_fail(f"tests/test_{cases[1][1]}.py", tests[1], cases[1][3],
                               cases[1][4], cases[1][5], passed + 1)
            msgs.append(msg("tool", rest))
        else:
            msgs.append(msg("tool", pytest_pass(passed + 2)))
    msgs.append(msg("assistant", f"All {passed + 2} tests pass. " + " ".join(
        f"`src/{pkg}/{m}.py`: {bug['why']} (`{bug['new'].strip()}`)."
        for n, m, bug, *_ in cases)))
    return record(msgs, 10, "agentic", "fix_two")


def rename(c, followup: bool = False):
    pkg = c.pick(PKGS)
    old = c.pick(["load_cfg", "get_conf", "read_settings", "fetch_opts", "cfg_load", "parse_conf"])
    new = c.pick(["load_config", "read_config", "config_from_file"])
    files = sorted(c.rng.sample([f"src/{pkg}/cli.py", f"src/{pkg}/server.py", f"src/{pkg}/config.py",
                                 f"tests/test_config.py", f"src/{pkg}/jobs.py"], c.randint(2, 4)))
    hits = "\n".join(f"{f}:{c.randint(3, 80)}:    {old}(path)" for f in files)
    n = c.randint(5, 30)
    msgs = [system(c), msg("user", ticket(c) + c.pick([f"Rename `{old}` to `{new}` everywhere in {pkg}.",
                                           f"We're standardising names: `{old}` becomes `{new}`.",
                                           f"Please rename {old} → {new} across {pkg}."])),
            act("", call("search", pattern=rf"\b{old}\b")),
            msg("tool", hits),
            act(f"{len(files)} " + c.pick([
                "files reference it. Editing each, definition included.",
                "matches, the definition among them; one edit per file.",
                "hits across the package — changing all of them, including the def."]),
                *[call("edit_file", path=f, old=f"{old}(", new=f"{new}(") for f in files])]
    msgs += [msg("tool", f"edited {f} (1 replacement)") for f in files]
    msgs += [act("", call("search", pattern=rf"\b{old}\b"),
                 call("run", command=c.pick(RUNNERS))),
             msg("tool", "(no matches)"), msg("tool", pytest_pass(n)),
             msg("assistant", f"Renamed `{old}` → `{new}` in {len(files)} files "
                              f"({', '.join(files)}); no references left, {n} tests pass.")]
    if not followup:
        return record(msgs, 8, "orchestration", "rename")
    alias = f"def {old}(*args, **kwargs):\n    return {new}(*args, **kwargs)\n"
    target = next((f for f in files if f.endswith("config.py")), files[0])
    msgs += [msg("user", c.pick(["Wait — plugins outside this repo still import the old name. "
                                 "Keep a deprecated alias?", "External callers use the old name; "
                                 "can you keep it working for one release?"])),
             act("", call("edit_file", path=target, old=f"def {new}(",
                                   new=alias.replace(f"return {new}", f"import warnings\n    "
                                                     f"warnings.warn('{old} is deprecated; use "
                                                     f"{new}', DeprecationWarning, stacklevel=2)"
                                                     f"\n    return {new}") + f"\n\ndef {new}(")),
             msg("tool", f"edited {target} (1 replacement)"),
             act("", call("run", command=c.pick([
                 "python -m pytest -q -W error::DeprecationWarning",
                 "python -W error::DeprecationWarning -m pytest -q",
                 "python -m pytest -q -x -W error::DeprecationWarning",
                 "python -m pytest -W error::DeprecationWarning",
                 "python -m pytest -q -W error::DeprecationWarning -p no:cacheprovider",
                 "python -X dev -m pytest -q -W error::DeprecationWarning"]))),
             msg("tool", pytest_pass(n)),
             msg("assistant", f"`{old}` is back as an alias in {target}, forwarding to "
                              f"`{new}` with a DeprecationWarning. " + c.pick([
                                  "Internal code uses only the new name (tests pass with "
                                  "warnings as errors).", "Nothing inside the repo calls the "
                                  "alias: the suite passes even with warnings turned into "
                                  "errors.", "Tests run with -W error stay green, so no "
                                  "internal caller still uses the old spelling."]))]
    return record(msgs, 10, "agentic", "rename_alias")


SOURCES = {
    "transcripts": [(2, look), (2, run_tests), (3, fix), (2, rename),
                    (1, lambda c: rename(c, True)), (0.6, fix_two)],
    "recoveries": [(1, lambda c: fix(c, "no_pytest")), (1, lambda c: fix(c, "edit_miss")),
                   (1, lambda c: rename(c, True))],
}
