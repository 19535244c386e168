"""Admission oracles for synthesized records: `judge(check, record) -> Verdict` with the check's
exact diagnostics (bash -n's lines, cargo's rendered errors, the Vox parser's `error[V003] 4:12`,
Python's SyntaxError line/column, YAML marks, jsonschema's path + message), which repair turns
feed back to the teacher. The check logic is mens.synth.oracle_checks; this module runs it safely.

Model output is never executed: checks parse, type-check or compile. Each runs in a child
process with, per process, RLIMIT_AS (memory_mb) and RLIMIT_CPU (timeout_s), no core files,
a 256 MB file-size cap, a wall clock (timeout_s per record; the process group is killed), an
environment of allow-listed variables only (no API keys, no proxy variables) and — where
`unshare -rn` works, see `isolation()` — its own empty network namespace. A timeout, a
memory blow-up or a crash is a failed verdict with that diagnostic. An oracle whose tool is not
here (no bash, no cargo) gives passed=None with the reason: unverified, never passed.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import re
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from mens.synth import oracle_checks as oc
from mens.errors import ConfigError

TIMEOUT_S = 20.0      # per record; a whole scratch crate of small modules checks in ~1 s here
MEMORY_MB = 2048      # address space per process: rustc needs ~512 MB of it for a tiny crate
STARTUP_S = 60.0      # a child's own start (imports) before the per-record clock runs
MAX_DIAG, MAX_LINE = 4000, 300    # bash -n echoes whole offending lines, however long
ROOT = Path(__file__).resolve().parents[2]        # the directory holding the mens package
ENV_KEEP = ("HOME", "LANG", "LC_ALL", "TMPDIR", "CARGO_HOME", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN")


@dataclass(frozen=True)
class Verdict:
    passed: bool | None          # None: the oracle could not run here (unverified)
    diagnostics: str             # the oracle's own words, located; "" when passed
    check: str
    unverified_reason: str | None = None


@dataclass(frozen=True)
class Limits:                    # path: the PATH to find tools on and give children; None: ours
    timeout_s: float
    memory_mb: int
    path: str | None


def judge(check: str, record: dict, *, timeout_s: float = TIMEOUT_S, memory_mb: int = MEMORY_MB,
          path: str | None = None) -> Verdict:
    return judge_batch(check, [record], timeout_s=timeout_s, memory_mb=memory_mb, path=path)[0]


def judge_batch(check: str, records: list[dict], *, timeout_s: float = TIMEOUT_S,
                memory_mb: int = MEMORY_MB, path: str | None = None,
                cargo: str | None = None) -> list[Verdict]:
    """One verdict per record; one child (or one bash, one scratch crate) for the batch, and a
    record that times out or kills its child costs only itself: the rest run in a new one."""
    if check not in oc.CHECKS:
        raise ConfigError(f"unknown admission check `{check}` (spoke.admission.check); known: "
                          f"{', '.join(sorted(oc.CHECKS))}. Fix the spoke's conf/spoke/*.yaml.",
                          key="spoke.admission.check")
    if not records:
        return []
    lim = Limits(float(timeout_s), int(memory_mb), path)
    if check == "shell_syntax":
        return _shell(records, lim)
    if check == "rust_compiles":
        return _rust(records, lim, cargo)
    return _pure(check, records, lim)


@cache
def _unshare() -> tuple[str, ...]:
    """`unshare -rn` as a prefix when it works here (user + network namespace: only a down
    loopback inside); found on our own PATH, not the (possibly bare) PATH children get."""
    exe = next((str(Path(d, "unshare")) for d in os.get_exec_path()
                if os.access(Path(d, "unshare"), os.X_OK)), None)
    try:
        ok = exe is not None and subprocess.run([exe, "-rn", "true"], capture_output=True,
                                                timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:                    # a loud fallback, once per process; isolation() says it too
        print("mens: note: `unshare -rn` does not work here, so oracle children share this "
              "machine's network (no proxy variables, nothing executed)", file=sys.stderr)
    return (exe, "-rn") if ok else ()


def isolation() -> dict:
    """What is enforced on every oracle child here, for telemetry and the report."""
    net = ("own network namespace (unshare -rn): no interface but a down loopback" if _unshare()
           else "not isolated: `unshare -rn` fails here; only proxy variables are withheld")
    return {"network": net, "memory": "RLIMIT_AS = memory_mb per process",
            "cpu": "RLIMIT_CPU ≈ timeout_s per record", "wall": "timeout_s per record, then "
            "the process group is killed", "env": f"only {', '.join(ENV_KEEP)} and PATH",
            "files": "RLIMIT_FSIZE 256 MB, RLIMIT_CORE 0", "executes_model_output": False}


def _env(lim: Limits, extra_path: str = "") -> dict:
    env = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
    path = lim.path if lim.path is not None else os.environ.get("PATH", os.defpath)
    env.update(PATH=f"{extra_path}:{path}" if extra_path else path, PYTHONPATH=str(ROOT),
               PYTHONDONTWRITEBYTECODE="1", CARGO_NET_OFFLINE="true", CARGO_INCREMENTAL="0")
    return env


def _popen(argv, cwd, lim: Limits, cpu: tuple[int, int], extra_path: str = "", **kw):
    """The child under its limits: through util-linux's `prlimit` where it exists (synthesis
    calls the oracle from several threads, and a preexec_fn after fork can deadlock a threaded
    parent), else set between fork and exec."""
    limits = []
    for res, value in ((resource.RLIMIT_AS, lim.memory_mb << 20), (resource.RLIMIT_CPU, cpu),
                       (resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, 256 << 20)):
        soft, hard = value if isinstance(value, tuple) else (value, value)
        cap = resource.getrlimit(res)[1]
        if cap != resource.RLIM_INFINITY:
            soft, hard = min(soft, cap), min(hard, cap)
        limits.append((res, soft, hard))
    prlimit = shutil.which("prlimit")
    if prlimit:
        flag = {resource.RLIMIT_AS: "--as", resource.RLIMIT_CPU: "--cpu",
                resource.RLIMIT_CORE: "--core", resource.RLIMIT_FSIZE: "--fsize"}
        argv = [prlimit, *(f"{flag[r]}={s}:{h}" for r, s, h in limits), "--", *argv]
        pre = None
    else:
        def pre():                 # in the child, between fork and exec
            for r, soft, hard in limits:
                resource.setrlimit(r, (soft, hard))
    return subprocess.Popen(argv, cwd=cwd, env=_env(lim, extra_path), preexec_fn=pre,
                            start_new_session=True, stdin=subprocess.DEVNULL, **kw)


def _kill(proc) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)      # the group: bash's and cargo's children too
    proc.wait()


def _death(rc: int, err: str, lim: Limits) -> str:
    if "MemoryError" in err or "memory allocation" in err or "xmalloc" in err:
        return f"the check exceeded its memory limit ({lim.memory_mb} MB)"
    if rc == -signal.SIGXCPU:
        return f"the check exceeded its CPU time limit ({lim.timeout_s:g} s)"
    if rc < 0:
        return f"the check's process was killed by {signal.Signals(-rc).name}"
    return f"the check's process exited with status {rc}: {err.strip()[-1000:]}"


def _timed_out(lim: Limits) -> str:
    return f"timed out after {lim.timeout_s:g} s: the check was stopped (input too large or " \
           "pathological)"


# The lines above (and the worker's, oracle_checks.worker) that say the check itself did not
# finish, at a line's start (after `blockN.sh: ` for bash): a reward counts these apart from an
# answer the check rejected (mens.objective.rewards).
STOPPED = re.compile(r"^(?:block\d+\.sh: )?(?:(?P<timeout>timed out after |the check exceeded "
                     r"its CPU time limit|bash -n was killed by SIGXCPU)|the check exceeded its "
                     r"memory limit|the check's process |bash -n was killed by |the check could "
                     r"not read this record|the input is nested too deeply)", re.M)


def failure(v: Verdict) -> str | None:
    """"timeout" or "crash" when the check was stopped or broke on this record, else None."""
    found = [m.group("timeout") is not None for m in STOPPED.finditer(v.diagnostics)]
    return None if v.passed is not False or not found else "timeout" if any(found) else "crash"


def _stream(argv_for, n: int, lim: Limits, cwd: str, marker: str, cpu) -> list[tuple]:
    """Runs a child that prints `MARKER ready`, then per item its output and `MARKER payload`.
    Returns per item ("ok", output, payload) | ("timeout",) | ("died", why) | ("unverified",
    why). On a timeout or death the item is charged and a new child resumes after it."""
    results: list[tuple] = []
    while len(results) < n:
        k = len(results)
        with tempfile.TemporaryFile("w+", errors="replace") as err:
            proc = _popen(argv_for(k), cwd, lim, cpu(n - k), stdout=subprocess.PIPE,
                          stderr=err, text=True, errors="replace")
            lines: queue.Queue = queue.Queue()
            reader = threading.Thread(target=lambda: [*map(lines.put, proc.stdout),
                                                      lines.put(None)], daemon=True)
            reader.start()
            ready, buf, deadline = False, [], time.monotonic() + STARTUP_S
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    _kill(proc)
                    results += [("timeout",)] if ready else \
                        [("unverified", f"the checker did not start in {STARTUP_S:g} s")] * (n - k)
                    break
                if line is None:                               # EOF: the child has exited
                    rc = proc.wait()
                    err.seek(0)
                    why = _death(rc, err.read(), lim)
                    if len(results) < n:
                        results += [("died", why)] if ready else \
                            [("unverified", f"the checker did not start: {why}")] * (n - k)
                    break
                if line.startswith(marker):
                    if ready:
                        results.append(("ok", "".join(buf), line[len(marker):].strip()))
                    ready, buf, deadline = True, [], time.monotonic() + lim.timeout_s
                elif sum(map(len, buf)) < 65536:
                    buf.append(line)
            reader.join(timeout=5)       # killed: the pipe is at EOF at once
            proc.stdout.close()
    return results


def _clip(text: str) -> str:
    lines = [ln if len(ln) <= MAX_LINE else ln[:MAX_LINE] + f" … ({len(ln) - MAX_LINE} more "
             f"chars)" for ln in text.strip().splitlines()]
    out = "\n".join(lines)
    more = f"\n… ({len(out) - MAX_DIAG} more chars)"
    return out if len(out) <= MAX_DIAG else out[:MAX_DIAG] + more


def _from(check: str, item: tuple, lim: Limits) -> Verdict:
    if item[0] == "ok":
        problems = json.loads(item[2])
        return Verdict(not problems, _clip("\n".join(problems)), check)
    if item[0] == "unverified":
        return Verdict(None, "", check, item[1])
    return Verdict(False, _timed_out(lim) if item[0] == "timeout" else item[1], check)


def _pure(check: str, records: list[dict], lim: Limits) -> list[Verdict]:
    marker = f"@@mens-oracle-{secrets.token_hex(8)}"
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp, "job.json")

        def argv(k: int) -> list[str]:
            job.write_text(json.dumps({"check": check, "records": records[k:], "marker": marker,
                                       "timeout_s": lim.timeout_s, "memory_mb": lim.memory_mb}))
            return [*_unshare(), sys.executable, "-s", "-m", "mens.synth.oracle_checks", str(job)]
        per = lim.timeout_s + 1        # the worker lowers its own soft limit record by record
        out = _stream(argv, len(records), lim, tmp, marker, lambda m: (
            math.ceil(STARTUP_S + per), math.ceil(STARTUP_S + per * m)))
    return [_from(check, item, lim) for item in out]


# ---------------------------------------------------------------- bash -n
def _which(name: str, path: str | None) -> str | None:     # which(name) alone: tests patch it
    return shutil.which(name) if path is None else shutil.which(name, path=path)


def _shell(records: list[dict], lim: Limits) -> list[Verdict]:
    """`bash -n` on every bash/sh block: one bash runs them all, one `bash -n` per block."""
    check, bash = "shell_syntax", _which("bash", lim.path)
    found = [oc.blocks(r, *oc.SHELL_LANGS) for r in records]     # linear scan: safe in-process
    if not bash:
        return [Verdict(None, "", check, "bash not found on PATH") if bs else
                Verdict(False, "no ```bash block in the answer", check) for bs in found]
    items = [(i, j) for i, bs in enumerate(found) for j in range(1, len(bs) + 1)]
    marker, cpu = f"@@mens-oracle-{secrets.token_hex(8)}", math.ceil(lim.timeout_s) + 1
    with tempfile.TemporaryDirectory() as tmp:
        for i, j in items:
            Path(tmp, f"r{i}").mkdir(exist_ok=True)
            Path(tmp, f"r{i}", f"block{j}.sh").write_text(found[i][j - 1])

        def argv(k: int) -> list[str]:
            script = Path(tmp, f"run{k}.sh")   # ulimit in a subshell: per `bash -n`, not the loop
            script.write_text(f"echo '{marker} ready'\n" + "".join(
                f"( ulimit -t {cpu}; exec '{bash}' -n r{i}/block{j}.sh ) 2>&1; echo '{marker}' $?\n"
                for i, j in items[k:]))
            return [*_unshare(), bash, "--norc", "--noprofile", str(script)]
        out = _stream(argv, len(items), lim, tmp, marker,
                      lambda m: (math.ceil(STARTUP_S + cpu * m),) * 2)
    diags: list[list[str]] = [oc.empty("bash", bs) for bs in found]
    for (i, j), item in zip(items, out):
        if item[0] == "ok" and item[2] != "0":
            text = item[1].replace(f"r{i}/", "")             # `block1.sh: line 2: syntax error…`
            rc = int(item[2])
            if rc > 128:
                text += f"\nblock{j}.sh: bash -n was killed by {signal.Signals(rc - 128).name}"
            diags[i].append(text.strip() or f"block{j}.sh: bash -n exited with status {rc}")
        elif item[0] != "ok":
            why = _timed_out(lim) if item[0] == "timeout" else item[1]
            diags[i].append(f"block{j}.sh: {why}")
    return [Verdict(False, "no ```bash block in the answer", check) if not bs else
            Verdict(not d, _clip("\n".join(d)), check) for bs, d in zip(found, diags)]


# ---------------------------------------------------------------- cargo check
def find_cargo(path: str | None) -> str | None:
    """cargo on PATH, else rustup's ~/.cargo/bin — the latter only when PATH was not given."""
    cargo = _which("cargo", path)
    if not cargo and path is None:
        home = Path.home() / ".cargo" / "bin" / "cargo"
        cargo = str(home) if home.exists() else None
    return cargo


def _rust(records: list[dict], lim: Limits, cargo: str | None) -> list[Verdict]:
    check, cargo = "rust_compiles", cargo or find_cargo(lim.path)
    rust = [oc.blocks(r, "rust") for r in records]
    tomls = [i for i, r in enumerate(records) if oc.blocks(r, "toml")]
    parsed = dict(zip(tomls, _pure(check, [records[i] for i in tomls], lim) if tomls else []))
    compiled = _cargo(cargo, {i: b for i, b in enumerate(rust) if b}, lim) if cargo else {}
    out = []
    for i, r in enumerate(records):   # tomllib on model text runs in the child; else presence only
        v = parsed.get(i) or Verdict(not (p := oc.rust_pure(r)), "\n".join(p), check)
        ok, diag = compiled.get(i, (True, ""))
        if v.passed is not None and rust[i] and not cargo:
            v = Verdict(None, "", check, "cargo not found (PATH, ~/.cargo/bin)") if v.passed else v
        elif v.passed is not None:
            both = "\n".join(filter(None, (v.diagnostics, diag)))
            v = Verdict(bool(v.passed and ok), _clip(both), check)
        out.append(v)
    return out


RS_PATH = re.compile(r"src/m(\d+)_(\d+)\.rs")


def _cargo(cargo: str, code: dict[int, list[str]], lim: Limits) -> dict[int, tuple[bool, str]]:
    """All blocks in ONE scratch crate, a module file per block, `cargo check --offline --tests`
    (no dependencies). rustc may stop before borrow-checking when another module has a resolve
    error, so failing modules are removed and the crate re-checked until clean: a module passes
    only in a clean run. A timeout or an error no module owns: each record alone instead."""
    if not code:
        return {}
    errors: dict[int, list[str]] = {i: [] for i in code}
    with tempfile.TemporaryDirectory() as tmp:
        (src := Path(tmp, "src")).mkdir()
        Path(tmp, "Cargo.toml").write_text(
            '[package]\nname = "scratch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\n')
        mods = {f"m{i}_{j}": i for i, bs in code.items() for j in range(len(bs))}
        for name, i in mods.items():
            (src / f"{name}.rs").write_text(code[i][int(name.split("_")[1])])
        live = set(mods)
        while live:
            (src / "lib.rs").write_text("#![allow(warnings)]\n" + "".join(
                f"mod {m};\n" for m in sorted(live)))
            cpu = math.ceil(lim.timeout_s) + 1
            proc = _popen([*_unshare(), cargo, "check", "--offline", "--tests", "--quiet",
                           "--message-format=json"], tmp, lim, (cpu, cpu),
                          extra_path=str(Path(cargo).parent), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, errors="replace")
            try:
                stdout, stderr = proc.communicate(timeout=lim.timeout_s)
            except subprocess.TimeoutExpired:
                _kill(proc)
                stdout, stderr = None, ""
            if stdout is not None and proc.returncode == 0:
                break
            bad: dict[str, list[str]] = {}
            other: list[str] = []         # errors no live module owns (lib.rs, the build)
            for line in (stdout or "").splitlines():
                msg = json.loads(line).get("message") if line.startswith("{") else None
                if msg and msg.get("level") == "error":
                    text = RS_PATH.sub(lambda g: f"block{int(g[2]) + 1}.rs",
                                       msg.get("rendered") or "")
                    owners = {Path(s["file_name"]).stem for s in msg.get("spans", [])} & live
                    for m in owners:
                        bad.setdefault(m, []).append(text)
                    if not owners and msg.get("spans"):
                        other.append(text.strip())
            left = {mods[m] for m in live}
            if not bad and len(left) > 1:     # cannot tell whose: one crate per record
                for i in left:
                    ok, diag = _cargo(cargo, {i: code[i]}, lim)[i]
                    errors[i] = [] if ok else [diag]
                break
            if not bad:
                i = left.pop()
                errors[i].append(_timed_out(lim) if stdout is None else
                                 "\n".join(other) or _death(proc.returncode, stderr, lim))
                break
            live -= set(bad)
            for m, texts in bad.items():
                errors[mods[m]] += [t.strip() for t in texts]
    return {i: (not e, "\n".join(e)) for i, e in errors.items()}
