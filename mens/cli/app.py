"""The one command pattern: every mens command's entry, error printer and exit codes.

Two entries, one outcome handling (`outcome`): `main(task, argv, name)` runs a stage's
`task(cfg, out_dir)` as a Hydra app (a run dir, `-m` sweeps, `--cfg job`); `command(fn, ...)`
runs a command that composes its own config because it must not get a run dir (`mens data`,
`mens afk`) or has none (`mens demo`). Either way an exception becomes one paragraph from
`print_error` — `mens: error (exit N): …` on stderr — and the exit code of mens.errors (0 ok ·
2 config/data · 3 refused · 4 failed · 130 interrupted); HYDRA_FULL_ERROR=1 shows the trace.

Hydra's own error printing exits 1 with a traceback-like dump. mens sets HYDRA_FULL_ERROR
internally so exceptions reach `main()`, which prints one paragraph and exits with mens's code
(the user's own HYDRA_FULL_ERROR=1 still gets the full trace). In a `-m` sweep each job's
outcome is caught and written to its run dir, so every job runs; the sweep exits with the
highest code any job had.
"""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Callable

from hydra.experimental.callback import Callback

from mens.config.explain import explain
from mens.errors import (EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_REFUSED,
                         ConfigError, Interrupted, MensError, RunFailed)
from mens.run.rundir import RunDir

_sweep_codes: list[int] = []
_run_code: list[int] = []   # hydra.main drops the task's return value; keep it here


def print_error(err: MensError) -> None:
    """The one error line of every mens command (tests and users grep for it)."""
    print(f"mens: error (exit {err.code}): {err.message}", file=sys.stderr)


def usage_error(text: str) -> int:
    """A command line mens cannot take (no such subcommand, a refused key): exit 2."""
    err = ConfigError(text)
    print_error(err)
    return err.code


def group_help(argv: list[str], doc: str | None) -> bool:
    """`mens <group> --help` (cloud, launch, data: commands that take a subcommand first) prints
    the group's help — its module's docstring — and exits 0; True when it did."""
    if argv[:1] not in (["-h"], ["--help"]):
        return False
    import inspect
    print(inspect.cleandoc(doc or "(no help: Python runs with -OO)"))
    return True


def job(task: Callable) -> Callable:
    """Wrap task(cfg, out_dir) -> exit code for Hydra: raise in a single run, record in a sweep."""
    def hydra_task(cfg):
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        from mens.config.compose import validate
        from mens.config.schema import register

        register()
        hc = HydraConfig.get()
        out_dir = Path(hc.runtime.output_dir)
        if hc.mode != RunMode.MULTIRUN:
            try:
                validate(cfg)
                code = task(cfg, out_dir)
            except Exception as e:  # returned, not raised: Hydra would print its own banner
                if os.environ.get("_MENS_USER_FULL_ERROR") == "1":
                    raise
                err = _as_mens_error(e, user_full=False)
                print_error(err)
                code = err.code
            _run_code.append(code)
            return code
        try:
            validate(cfg)
            code = task(cfg, out_dir)
        except Exception as e:  # every job runs; its outcome is what counts
            err = _as_mens_error(e, os.environ.get("_MENS_USER_FULL_ERROR") == "1")
            print_error(err)
            code, message = err.code, err.message
        else:
            message = ""
        RunDir(out_dir).write_json(RunDir.OUTCOME, {
            "exit_code": code, "overrides": list(hc.overrides.task), "message": message},
            indent=None)
        return code
    return hydra_task


_interrupt: list[bool] = []   # SIGINT arrived in this process (see _note_interrupt)


def _as_mens_error(e: Exception, user_full: bool) -> MensError:
    if _interrupt and not isinstance(e, MensError):
        return Interrupted(f"interrupted ({type(e).__name__} raised on the way out: {e})")
    try:
        return explain(e)
    except Exception:
        if user_full:
            raise
        return RunFailed(f"unexpected {type(e).__name__}: {e} (HYDRA_FULL_ERROR=1 shows the "
                         f"full trace; please report it)")


class SweepOutcomes(Callback):
    """Prints each job's outcome as it ends and a summary at the end of a sweep."""

    def on_job_end(self, config, job_return, **kwargs) -> None:
        from hydra.types import RunMode
        if config.hydra.mode != RunMode.MULTIRUN:
            return
        code = job_return.return_value if isinstance(job_return.return_value, int) else EXIT_FAILED
        _sweep_codes.append(code)
        word = {EXIT_OK: "ok", EXIT_CONFIG: "bad config", EXIT_REFUSED: "refused",
                EXIT_FAILED: "failed"}.get(code, "exit")
        print(f"[sweep] job {config.hydra.job.num}: {word} (exit {code}) "
              f"{' '.join(config.hydra.overrides.task)}")

    def on_multirun_end(self, config, **kwargs) -> None:
        if not _sweep_codes:   # jobs ran in other processes (submitit): their outcome files
            for f in sorted(Path(config.hydra.sweep.dir).glob("*/" + RunDir.OUTCOME),
                            key=lambda f: (len(f.parent.name), f.parent.name)):
                out = json.loads(f.read_text())
                _sweep_codes.append(out["exit_code"])
                print(f"[sweep] job {f.parent.name}: exit {out['exit_code']} "
                      f"{' '.join(out['overrides'])}")
        bad = sum(1 for c in _sweep_codes if c)
        print(f"[sweep] {len(_sweep_codes)} jobs, {len(_sweep_codes) - bad} ok, {bad} not ok; "
              f"outputs under {config.hydra.sweep.dir}")


def main(task: Callable, argv: list[str] | None = None, name: str = "mens") -> int:
    """Run a mens Hydra app; returns (and exits with) its exit code. `name` names run dirs."""
    import hydra

    from mens.config.compose import default_overrides
    from mens.resources import CONF_DIR
    from mens.config.schema import register

    register()
    argv = sys.argv[1:] if argv is None else argv
    argv = default_overrides(argv)
    if not any(a.startswith("hydra.job.name=") for a in argv):
        argv.append(f"hydra.job.name={name}")
    resume = [a.split("=", 1)[1] for a in argv if a.startswith("resume=")]
    if resume and not any(a.startswith("hydra.run.dir=") for a in argv):
        # continue in the run's own dir, keeping its original .hydra/ record
        argv += [f"hydra.run.dir={resume[0]}", "hydra.output_subdir=null"]
    sys.argv = [sys.argv[0], *argv]
    user_full = os.environ.get("HYDRA_FULL_ERROR") == "1"
    before = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["_MENS_USER_FULL_ERROR"] = "1" if user_full else "0"
    os.environ["HYDRA_FULL_ERROR"] = "1"   # let exceptions reach us; we print them
    _sweep_codes.clear()
    _run_code.clear()
    app = hydra.main(config_path=str(CONF_DIR), config_name="mens", version_base="1.3")(job(task))
    try:
        return outcome(lambda: _hydra_code(app()), user_full)
    finally:   # an in-process caller's next command sees the user's setting, not ours
        if before is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = before


def in_place(argv: list[str]) -> list[str]:
    """argv for a Hydra app that makes no run dir under outputs/ and no log file (export, push:
    they write only into their destination); the user's own hydra.* choices win."""
    argv = list(argv)
    for extra in ("hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=none",
                  "hydra/hydra_logging=none"):
        if not any(a.startswith(extra.split("=")[0] + "=") for a in argv):
            argv.append(extra)
    return argv


def _note_interrupt(signum, frame):
    """Python's own SIGINT behaviour (KeyboardInterrupt), remembered: a KeyboardInterrupt raised
    inside a library's C code can surface as another exception (torch turns one inside tensor
    construction into a ValueError), and that is still the user's Ctrl-C, so exit 130."""
    _interrupt.append(True)
    signal.default_int_handler(signum, frame)


def command(fn: Callable[..., int], *args) -> int:
    """fn(*args) -> exit code, for a command that is no Hydra app (it composes its own config
    with mens.config.compose, or has none), with the Hydra apps' printer and exit codes."""
    return outcome(lambda: fn(*args), os.environ.get("HYDRA_FULL_ERROR") == "1")


def _hydra_code(_) -> int:
    """hydra.main returns nothing: a sweep's highest job code, or the single run's code."""
    if _sweep_codes:
        return max(_sweep_codes)
    return _run_code[-1] if _run_code else EXIT_OK


def outcome(fn: Callable[[], int], user_full: bool) -> int:
    """fn() -> its exit code; whatever it raises -> one paragraph and mens's exit code (Ctrl-C:
    130), or the full trace where the user set HYDRA_FULL_ERROR=1 (`user_full`)."""
    _interrupt.clear()
    try:
        previous = signal.signal(signal.SIGINT, _note_interrupt) \
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler else None
    except ValueError:   # not the main thread: leave signals alone
        previous = None
    try:
        return fn()
    except MensError as e:
        if user_full:
            raise
        print_error(e)
        return EXIT_INTERRUPTED if _interrupt else e.code
    except KeyboardInterrupt:
        print("mens: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:
        if user_full:
            raise
        err = _as_mens_error(e, user_full)
        print_error(err)
        return err.code
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
