"""rust_workspace: borrow-checker fixes, refactors and cargo-workspace tasks. Every ```rust
block an answer holds is compiled (admission: one scratch crate, `cargo check --tests`);
`verify` additionally confirms, when cargo exists, that each quoted broken snippet really fails
with the error code the record claims."""
from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from .common import fence, join, jdump, msg, record
from .rust_borrowck import CASES, TYPES
from .rust_refactors import REFACTORS, lib_ids, lib_limits, lib_status

SYSTEM = [
    "You are a Rust engineer working in a cargo workspace. Explain borrow-checker errors "
    "precisely, prefer borrowing over cloning, and give complete code in ```rust blocks.",
    "Rust assistant for a multi-crate workspace: idiomatic fixes, minimal diffs, code that "
    "compiles on stable without extra dependencies unless asked.",
    "You review and fix Rust. State the cause of an error in one or two sentences, then the "
    "corrected code; manifests go in ```toml blocks.",
]
PREFIX = ["ledger", "fleet", "orchard", "beacon", "harbor", "quiver", "turbine", "archive",
          "vault", "mailbox", "cohort", "station", "garden", "parcel", "reactor"]
SUFFIX = ["core", "api", "cli", "store", "proto", "worker", "types", "sync", "web"]
DEPS = [("serde", '{ version = "1", features = ["derive"] }'), ("thiserror", '"2"'),
        ("anyhow", '"1"'), ("tracing", '"0.1"'), ("regex", '"1"'),
        ("clap", '{ version = "4", features = ["derive"] }'),
        ("tokio", '{ version = "1", features = ["rt", "macros"] }'), ("bytes", '"1"'),
        ("uuid", '{ version = "1", features = ["v4"] }')]
LICENSES = ["MIT OR Apache-2.0", "Apache-2.0", "MIT", "MPL-2.0", "BSD-3-Clause", "ISC"]


def weighted(c, table):
    """A weighted choice among the split's share of `table`: a third of the borrow-checker
    cases and refactors never appear in training, so eval fixes are of unseen kinds."""
    table = c.part(table)
    return c.rng.choices([f for f, _ in table], [w for _, w in table])[0]


def crate_file(c):
    return (f"crates/{c.pick(PREFIX)}-{c.choice(SUFFIX)}/src/"
            f"{c.choice(['lib', 'model', 'report', 'util'])}.rs")


def borrowck_fix(c):
    broken, code, text, fixed, why, d = weighted(c, CASES)(c)
    err = f"error[{code}]: {text}\n --> {crate_file(c)}"
    user = c.pick([f"`cargo check` fails:\n{fence('text', err)}\n{fence('rust', broken)}",
                   f"Why doesn't this compile? rustc says `error[{code}]: {text}`.\n"
                   f"{fence('rust', broken)}",
                   f"{fence('rust', broken)}\nerror[{code}]: {text}\nHow do I fix it properly?"])
    rec = record([msg("system", c.choice(SYSTEM)), msg("user", user),
                  msg("assistant", join(c.prose(why), fence("rust", fixed)))], d,
                 "warmup" if d <= 2 else "syntax" if d <= 4 else "reasoning", f"borrowck_{code}")
    rec["_broken"] = [(broken, code)]
    return rec


def borrowck_dialogue(c):
    broken, code, text, fixed, why, d = weighted(c, CASES)(c)
    msgs = [msg("system", c.choice(SYSTEM)),
            msg("user", c.pick(["Before you fix anything: why does the borrow checker reject "
                                "this?", "Explain this error to me first, no code yet.",
                                "What is rustc actually complaining about here?"])
                + f"\n{fence('rust', broken)}\n`error[{code}]: {text}`"),
            msg("assistant", why),
            msg("user", c.pick(["Makes sense. Now the fixed version, please.", "OK — show me "
                                "the fix.", "Got it. Fixed code?"])),
            msg("assistant", fence("rust", fixed))]
    rec = record(msgs, min(8, d + 3), "multi_turn", f"borrowck_dialogue_{code}")
    rec["_broken"] = [(broken, code)]
    return rec


def refactor(c):
    task, before, after, why, d = weighted(c, REFACTORS)(c)
    user = task + (f"\n{fence('rust', before)}" if before else "")
    return record([msg("system", c.choice(SYSTEM)), msg("user", user),
                   msg("assistant", join(fence("rust", after), c.prose(why)))], d,
                  "syntax" if d <= 4 else "reasoning", "refactor")


def refactor_review(c):
    """Two rounds: a refactor, then a reviewer's follow-up applied on top."""
    task, before, after, why, d = weighted(c, REFACTORS)(c)
    t2, _, after2, why2, _ = weighted(c, REFACTORS)(c)
    if after2.split("\n")[0] == after.split("\n")[0]:
        return refactor_review(c)
    msgs = [msg("system", c.choice(SYSTEM)),
            msg("user", task + (f"\n{fence('rust', before)}" if before else "")),
            msg("assistant", join(fence("rust", after), c.prose(why))),
            msg("user", c.pick(["Review comment from the team, same module:", "Next ticket in "
                                "this crate:", "Also requested in the PR review:"]) + " " + t2),
            msg("assistant", join(fence("rust", after2), c.prose(why2)))]
    return record(msgs, 8, "multi_turn", "refactor_review")


def names(c):
    p = c.pick(PREFIX)
    return p, [f"{p}-{s}" for s in c.rng.sample(SUFFIX, c.randint(2, 4))]


def manifest_params(c):
    return {"deps": c.picks(DEPS, 2), "license": c.pick(LICENSES),
            "version": f"0.{c.randint(1, 12)}.{c.randint(0, 9)}",
            "edition": c.choice(["2021", "2021", "2024"])}


def root_manifest(members, mp):
    m = ",\n".join(f'    "crates/{n}"' for n in members)
    dep = "\n".join(f"{n} = {v}" for n, v in mp["deps"])
    return (f'[workspace]\nresolver = "2"\nmembers = [\n{m},\n]\n\n[workspace.package]\n'
            f'edition = "{mp["edition"]}"\nversion = "{mp["version"]}"\nlicense = '
            f'"{mp["license"]}"\n\n[workspace.dependencies]\n{dep}')


def member_manifest(name, mp, deps=()):
    dl = "".join(f'\n{d} = {{ path = "../{d}" }}' for d in deps)
    return (f'[package]\nname = "{name}"\nversion.workspace = true\nedition.workspace = true\n'
            f'license.workspace = true\n\n[dependencies]\n{mp["deps"][0][0]} = '
            f'{{ workspace = true }}{dl}')


def lib_for(c, crate):
    return c.pick([lib_ids, lib_status, lib_limits])(c, crate)


def workspace_setup(c):
    p, members = names(c)
    mp = manifest_params(c)
    user = c.pick([f"Set up a cargo workspace for crates {', '.join(members)} sharing version, "
                   f"edition, licence ({mp['license']}) and dependency versions.",
                   f"Root Cargo.toml for a workspace with {', '.join(members)}; dependency "
                   f"versions ({', '.join(n for n, _ in mp['deps'])}) should live in one place.",
                   f"I'm splitting {p} into {len(members)} crates ({', '.join(members)}). What "
                   f"do the manifests look like? Edition {mp['edition']}."])
    ans = join(c.prose(c.pick(["Root manifest (virtual: no `[package]`):", "The workspace root "
                               "holds no package of its own:", "Top-level Cargo.toml, a "
                               "virtual manifest:"])),
               fence("toml", root_manifest(members, mp)),
               c.prose(f"Each member inherits from it, e.g. `crates/{members[0]}/Cargo.toml`:"),
               fence("toml", member_manifest(members[0], mp)),
               c.prose(c.pick(["`resolver = \"2\"` must be explicit in a virtual workspace; "
                               "`workspace = true` pins every member to one version.",
                               "Members opt in per key with `.workspace = true`, so one edit at "
                               "the root bumps the version everywhere.", "A virtual root needs "
                               "the resolver spelled out; members then inherit package fields "
                               "and dependency versions."])))
    return record([msg("system", c.choice(SYSTEM)), msg("user", user), msg("assistant", ans)],
                  c.choice([5, 6]), "reasoning", "workspace_setup")


def extract_crate(c):
    p, members = names(c)
    mp = manifest_params(c)
    new = f"{p}-{c.choice(['types', 'model', 'ids', 'shared', 'common'])}"
    if new in members:
        return extract_crate(c)
    user = c.pick([f"Move the shared types out of {members[0]} into a new crate {new} that "
                   f"{members[0]} depends on.", f"Extract the shared types into {new} "
                   f"so {', '.join(members)} can all use them.", f"Create {new} in the "
                   f"workspace and make {members[0]} use it instead of its own copies."])
    ans = join(c.prose(c.pick([
        "Steps: create the crate, register it in the root `members`, depend on it by path, "
        "then re-export from the old location so callers keep compiling during the move.",
        "Plan: new member crate, add it to `members`, path dependency from the user crate, "
        "and a `pub use` at the old path until callers migrate.",
        "Four moves: scaffold the crate, list it in the workspace, point the dependent crate "
        "at it by path, keep a re-export for a release."])),
               fence("toml", root_manifest(members + [new], mp)),
               fence("toml", member_manifest(new, mp)),
               f"`crates/{new}/src/lib.rs`:", fence("rust", lib_for(c, new)),
               f"`crates/{members[0]}/Cargo.toml` gains the path dependency:",
               fence("toml", member_manifest(members[0], mp, [new])),
               c.prose(f"Check with `cargo check -p {members[0]}` and `cargo test -p {new}`."))
    return record([msg("system", c.choice(SYSTEM)), msg("user", user), msg("assistant", ans)],
                  c.choice([8, 9]), "orchestration", "extract_crate")


TOOLS = "<tools>\n" + jdump({"name": "cargo", "description": "Run cargo in the workspace root.",
                             "parameters": {"type": "object", "properties": {"args": {
                                 "type": "array", "items": {"type": "string"}}},
                                 "required": ["args"]}}) + "\n" + jdump(
    {"name": "write_file", "description": "Overwrite a file.", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "content": {
            "type": "string"}}, "required": ["path", "content"]}}) + "\n</tools>"


def cargo_agentic(c):
    p, members = names(c)
    mp = manifest_params(c)
    user_crate, dep = members[0], members[1]
    t, ident = c.pick(TYPES), members[1].replace("-", "_")
    call = lambda name, args: f"<tool_call>\n{jdump({'name': name, 'arguments': args})}\n</tool_call>"
    err = (f"error[E0432]: unresolved import `{ident}`\n --> crates/{user_crate}/src/lib.rs:1:5\n"
           f"  |\n1 | use {ident}::{t};\n  |     {'^' * len(ident)} use of unresolved module "
           f"or unlinked crate `{ident}`")
    fixed = member_manifest(user_crate, mp, [dep])
    msgs = [msg("system", c.choice(SYSTEM) + "\n\n" + TOOLS),
            msg("user", c.pick([f"{user_crate} stopped compiling after I started using {t} from "
                                f"{dep}. Fix it.", f"`cargo check -p {user_crate}` is red since "
                                f"the {dep} import. Sort it out please.", f"Make {user_crate} "
                                f"build again; it needs {t} from {dep}."])),
            msg("assistant", c.pick(["Reproducing first.", "Let me see the error.",
                                     "Running the check."]) + "\n" +
                call("cargo", {"args": ["check", "-p", user_crate, "--message-format=short"]})),
            msg("tool", jdump({"exit": 101, "stderr": err})),
            msg("assistant", f"`{dep}` is not a dependency of `{user_crate}`. " + c.pick([
                "The import has nothing to resolve against; adding the path dependency.",
                "Declaring it in the manifest (by path, it lives in this workspace).",
                "A `[dependencies]` entry with `path` fixes the resolution."]) + "\n" +
                call("write_file", {"path": f"crates/{user_crate}/Cargo.toml", "content": fixed})),
            msg("tool", jdump({"ok": True})),
            msg("assistant", call("cargo", {"args": ["check", "-p", user_crate]})),
            msg("tool", jdump({"exit": 0, "stderr": f"    Checking {dep} v{mp['version']}\n    "
                               f"Checking {user_crate} v{mp['version']}\n    Finished `dev` "
                               f"profile"}))]
    d = 9
    if c.chance(0.5):
        n = c.randint(3, 40)
        msgs += [msg("assistant", call("cargo", {"args": ["test", "-p", user_crate]})),
                 msg("tool", jdump({"exit": 0, "stdout": f"test result: ok. {n} passed; 0 failed;"
                                                         f" 0 ignored"}))]
        d = 10
    msgs.append(msg("assistant", join(f"`{user_crate}` now depends on `{dep}` by path "
                                      f"(`crates/{user_crate}/Cargo.toml`):", fence("toml", fixed),
                                      "`cargo check` passes" + (" and the tests pass." if d == 10
                                                                else "."))))
    return record(msgs, d, "agentic", "cargo_agentic")


SOURCES = {
    "borrowck_fixes": [(7, borrowck_fix), (3, borrowck_dialogue)],
    "refactors": [(6, refactor), (4, refactor_review)],
    "workspace_tasks": [(2.5, workspace_setup), (3.5, extract_crate), (4, cargo_agentic)],
}


def verify(records: list[dict]) -> None:
    """With cargo here: every broken snippet must fail, with the code its record claims."""
    cargo = shutil.which("cargo") or next((str(p) for p in [Path.home() / ".cargo/bin/cargo"]
                                           if p.exists()), None)
    snippets = [s for r in records for s in r.get("_broken", [])]
    if not cargo or not snippets:
        return
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "Cargo.toml").write_text('[package]\nname = "broken"\nversion = "0.0.0"\n'
                                           'edition = "2021"\n')
        Path(tmp, "src").mkdir()
        for i, (src, _) in enumerate(snippets):
            Path(tmp, "src", f"b{i}.rs").write_text(src)
        live, seen = set(range(len(snippets))), {}
        while live:        # rustc stops early on some errors: re-check what is still silent
            Path(tmp, "src", "lib.rs").write_text("#![allow(warnings)]\n" + "".join(
                f"mod b{i};\n" for i in sorted(live)))
            out = subprocess.run([cargo, "check", "--offline", "--message-format=json"],
                                 cwd=tmp, capture_output=True, text=True, timeout=600)
            new = {}
            for line in out.stdout.splitlines():
                m = json.loads(line).get("message") if line.startswith("{") else None
                if m and m.get("level") == "error" and m.get("code"):
                    for s in m["spans"]:
                        stem = Path(s["file_name"]).stem     # macro spans name other files
                        if s["file_name"].startswith("src/b") and stem[1:].isdigit():
                            new.setdefault(int(stem[1:]), set()).add(m["code"]["code"])
            if not new:
                break
            seen.update(new)
            live -= set(new)
    bad = [(snippets[i][1], seen.get(i), snippets[i][0]) for i in range(len(snippets))
           if snippets[i][1] not in seen.get(i, set())]
    if bad:
        raise RuntimeError(f"rust templates: {len(bad)} broken snippets do not fail as claimed; "
                           f"first: claims {bad[0][0]}, rustc gave {bad[0][1]}:\n{bad[0][2]}")
