"""The shell: the `mens` command and every `python -m mens…` entry point.

Takes argv; gives an exit code (mens.errors: 0 ok · 2 bad config or data · 3 refused · 4 failed
· 130 interrupted). Each command is one thin module here (COMMANDS) whose `main(argv)` goes
through mens.cli.app — a stage's `task(cfg, out_dir)` as a Hydra app, or `command(fn)` where a
run dir must not be made — so every command prints errors the same way; the work lives in the
stage packages. Each `python -m mens.X` is a two-line shim calling `as_main` here. Nothing else
in mens imports this package.

    mens plan +hw=h200 +rung=0.6b        = python -m mens.plan  …
    mens train +hw=m_series +rung=0.6b   = python -m mens       …
"""
from __future__ import annotations

import difflib
import importlib
import os
import sys

# OpenMP threads that wait passively instead of spinning: set before torch loads (every mens
# process enters here). Per-record attention runs many small parallel regions per step; with
# spinning waits a second process on the box (a test, a peer, the OS) turned a 1.1 s step at
# seq 1152 into 10 s on 2 cores; passive: 1.7 s vs 2.0 s for the masked path. A user's own
# setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from mens.errors import EXIT_OK

COMMANDS = {
    "train": ("mens.cli.train", "compile, plan and train a run (= python -m mens)"),
    "plan": ("mens.cli.plan", "compile and plan only: the plan table, spec.yaml and plan.json"),
    "export": ("mens.cli.export", "a finished run → merged model, GGUFs, GGUF adapter, Modelfile"),
    "serve": ("mens.cli.serve", "an OpenAI-compatible server over a base and its LoRA adapters"),
    "compare": ("mens.cli.compare", "base vs fine-tuned on held-out prompts, or runs side by side"),
    "calibrate": ("mens.cli.calibrate", "measure the real peak memory of a shape (a record)"),
    "fit": ("mens.cli.fit", "fit the memory contract's cells from calibration records"),
    "data": ("mens.cli.data", "inspect data: format, splits, token lengths, a rendered record"),
    "demo": ("mens.cli.demo", "train (or reuse) the tiny default, serve it, ask base and adapter"),
    "cloud": ("mens.cli.cloud", "cloud offers planned and priced (estimate), a SkyPilot task (launch)"),
    "launch": ("mens.cli.launch", "the file torchrun, SLURM or Kubeflow needs to run this on "
               "hw.nodes × hw.devices (torchrun.sh, sbatch.sh, trainjob.yaml), or run it on Ray"),
    "recommend": ("mens.cli.recommend", "recommendation.md: what fits this machine, what to rent, how to run it"),
    "ladder": ("mens.cli.ladder", "every rung × spoke cell's state: trained, gated, stale, missing, no fit"),
    "eval": ("mens.cli.eval", "benchmarks (lm-eval), oracle pass@k, collateral, judge — with "
             "intervals → eval.json"),
    "gate": ("mens.cli.gate", "pass when the in-domain gain is significant and nothing regresses "
             "→ gate.json"),
    "afk": ("mens.cli.afk", "the unattended queue: train missing cells smallest first "
            "(pause, abort, status)"),
    "studio": ("mens.cli.studio", "the local web app: ladder, recipe + live plan, jobs, data, "
               "evals, serving"),
    "push": ("mens.cli.push", "a run's adapter, card, merged model and GGUFs → the Hugging Face "
             "Hub (push.dry_run: assemble only)"),
}


def command_table() -> list[tuple[str, str, str]]:
    """[(name, one-line summary, module)] of every command, in `mens --help`'s order: what the
    docs' commands reference is generated from."""
    return [(name, summary, module) for name, (module, summary) in COMMANDS.items()]


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: mens <command> [hydra overrides]   (-m: a sweep; <command> --help: its "
             "config)", "", "commands:"]
    lines += [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
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
    return importlib.import_module(COMMANDS[name][0]).main(rest)


def entry() -> None:
    """[project.scripts] mens = mens.cli:entry"""
    sys.exit(main())


def as_main(module: str, command: str) -> None:
    """The whole of every `python -m mens.X` shim: `as_main(__name__, "X")` runs command X's
    main (sys.argv as Python set it) when the shim is run, and nothing when it is imported."""
    main_of = importlib.import_module(COMMANDS[command][0]).main   # KeyError: no such command
    if module == "__main__":
        sys.exit(main_of())
