"""The shell: the `mens` command and every `python -m mens…` entry point.

Takes argv; gives an exit code (mens.errors: 0 ok · 2 bad config or data · 3 refused · 4 failed
· 130 interrupted). Each command is one thin module here that hands a stage's `task(cfg,
out_dir)` to the Hydra app (mens.cli.app); the work lives in the stage packages. Nothing else in
mens imports this package.

    mens plan +hw=h200 +rung=0.6b        = python -m mens.plan  …
    mens train +hw=m_series +rung=0.6b   = python -m mens       …
"""
from __future__ import annotations

import difflib
import importlib
import sys

from mens.errors import EXIT_CONFIG, EXIT_OK

COMMANDS = {
    "train": ("mens.cli.train", "compile, plan and train a run (= python -m mens)"),
    "plan": ("mens.cli.plan", "compile and plan only: the plan table, spec.yaml and plan.json"),
    "export": ("mens.cli.export", "a finished run → merged model, GGUFs, GGUF adapter, Modelfile"),
    "serve": ("mens.cli.serve", "an OpenAI-compatible server over a base and its LoRA adapters"),
    "compare": ("mens.cli.compare", "base vs fine-tuned on held-out prompts, or runs side by side"),
    "calibrate": ("mens.cli.calibrate", "measure the real peak memory of a shape (a record)"),
    "fit": ("mens.cli.fit", "fit the memory contract's cells from calibration records"),
    "demo": ("mens.cli.demo", "train (or reuse) the tiny default, serve it, ask base and adapter"),
}


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
        near = difflib.get_close_matches(name, list(COMMANDS), n=1)
        hint = f" Did you mean `mens {near[0]}`?" if near else ""
        print(f"mens: error (exit 2): unknown command `{name}`.{hint} Commands: "
              f"{', '.join(COMMANDS)} (`mens --help` says what each does).", file=sys.stderr)
        return EXIT_CONFIG
    sys.argv = [f"mens {name}", *rest]
    return importlib.import_module(COMMANDS[name][0]).main(rest)


def entry() -> None:
    """[project.scripts] mens = mens.cli:entry"""
    sys.exit(main())
