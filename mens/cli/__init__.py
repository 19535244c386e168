"""The shell: the `mens` command and every `python -m mens…` entry point.

Takes argv; gives an exit code (mens.errors: 0 ok · 2 bad config or data · 3 refused · 4 failed
· 130 interrupted). Each command is declared once, in COMMANDS: its name, its one-line summary,
the module whose `main(argv)` runs it (a thin module here, through mens.cli.app — a stage's
`task(cfg, out_dir)` as a Hydra app, or `command(fn)` where a run dir must not be made — so every
command prints errors the same way; the work lives in the stage packages) and its `python -m`
name. The rest is derived: `mens --help`, the docs' commands reference (command_table), and
each `python -m mens.X` file, which is the same two lines everywhere (`as_main(__spec__,
__name__)` finds its command here by its own module name). Nothing else in mens imports this
package.

    mens plan +hw=h200 +rung=0.6b        = python -m mens.plan  …
    mens train +hw=m_series +rung=0.6b   = python -m mens       …
"""
from __future__ import annotations

import difflib
import importlib
import os
import sys
from dataclasses import dataclass

# OpenMP threads that wait passively instead of spinning: set before torch loads (every mens
# process enters here). Per-record attention runs many small parallel regions per step; with
# spinning waits a second process on the box (a test, a peer, the OS) turned a 1.1 s step at
# seq 1152 into 10 s on 2 cores; passive: 1.7 s vs 2.0 s for the masked path. A user's own
# setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from mens.errors import EXIT_OK


@dataclass(frozen=True)
class Command:
    """One `mens NAME` command (its name is its key in COMMANDS)."""
    summary: str    # one line: `mens --help` and the docs' commands reference print it
    main: str       # the module whose main(argv) runs it
    python_m: str   # `python -m <this>` runs it too: a shim (as_main) or `main` itself


def _c(name: str, summary: str, python_m: str | None = None) -> tuple[str, Command]:
    # main in mens/cli/NAME.py, `python -m mens.NAME` unless the row names another module
    return name, Command(summary, f"mens.cli.{name}", python_m or f"mens.{name}")


COMMANDS = dict([
    _c("train", "compile, plan and train a run (= python -m mens)", "mens"),
    _c("plan", "compile and plan only: the plan table, spec.yaml and plan.json"),
    _c("export", "a finished run → merged model, GGUFs, GGUF adapter, Modelfile"),
    _c("serve", "an OpenAI-compatible server over a base and its LoRA adapters"),
    _c("compare", "base vs fine-tuned on held-out prompts, or runs side by side"),
    _c("calibrate", "measure the real peak memory of a shape (a record)"),
    _c("fit", "fit the memory contract's cells from calibration records"),
    _c("data", "inspect data: format, splits, token lengths, a rendered record"),
    _c("demo", "train (or reuse) the tiny default, serve it, ask base and adapter",
       "mens.cli.demo"),   # `make demo`; mens.cli.demo is its own __main__
    _c("cloud", "cloud offers planned and priced (estimate), a SkyPilot task (launch)"),
    _c("launch", "the file torchrun, SLURM or Kubeflow needs to run this on hw.nodes × "
       "hw.devices (torchrun.sh, sbatch.sh, trainjob.yaml), or run it on Ray"),
    _c("recommend", "recommendation.md: what fits this machine, what to rent, how to run it"),
    _c("ladder", "every rung × spoke cell's state: trained, gated, stale, missing, no fit"),
    _c("eval", "benchmarks (lm-eval), oracle pass@k, collateral, judge — with intervals → "
       "eval.json"),
    _c("gate", "pass when the in-domain gain is significant and nothing regresses → gate.json"),
    _c("afk", "the unattended queue: train missing cells smallest first (pause, abort, status)"),
    _c("studio", "the local web app: ladder, recipe + live plan, jobs, data, evals, serving"),
    _c("push", "a run's adapter, card, merged model and GGUFs → the Hugging Face Hub "
       "(push.dry_run: assemble only)"),
])


def command_table() -> list[tuple[str, str, str]]:
    """(name, summary, python -m module) of every command, in table order (the docs' commands
    reference is generated from it)."""
    return [(name, c.summary, c.python_m) for name, c in COMMANDS.items()]


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: mens <command> [hydra overrides]   (-m: a sweep; <command> --help: its "
             "config)", "", "commands:"]
    lines += [f"  {name:<{width}}  {c.summary}" for name, c in COMMANDS.items()]
    lines += ["", "e.g. mens plan +hw=rtx4090 +rung=8b lane=qlora · mens train +hw=m_series "
              "+rung=0.6b"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return EXIT_OK
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        from mens.cli.app import usage_error

        near = difflib.get_close_matches(name, list(COMMANDS), n=1)
        hint = f" Did you mean `mens {near[0]}`?" if near else ""
        return usage_error(f"unknown command `{name}`.{hint} Commands: {', '.join(COMMANDS)} "
                           f"(`mens --help` says what each does).")
    sys.argv = [f"mens {name}", *rest]
    return importlib.import_module(COMMANDS[name].main).main(rest)


def entry() -> None:
    """[project.scripts] mens = mens.cli:entry"""
    sys.exit(main())


def as_main(spec, name: str) -> None:
    """The whole of every `python -m` shim: `as_main(__spec__, __name__)` runs the main of the
    command whose python_m is the shim's own module (sys.argv as Python set it) when the shim
    is run, and nothing when it is imported."""
    module = spec.name.removesuffix(".__main__")   # mens.plan.__main__ → mens.plan
    by_module = {c.python_m: c for c in COMMANDS.values()}
    main_of = importlib.import_module(by_module[module].main).main   # KeyError: undeclared
    if name == "__main__":
        sys.exit(main_of())
