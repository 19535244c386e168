"""Which cells the queue trains, and each one's plan — torch-free.

A cell is a rung × spoke of the ladder, named `rung/spoke` (`tiny/vox_lang`). `afk.cells` names
them; by default the ladder (mens.ladder) gives every cell that is missing or stale and fits
this machine. Each cell is planned here with the same compile_run the trainer uses (purpose
plan: nothing loads), so the queue can order itself smallest predicted peak first and refuse
what does not fit before anything runs.
"""
from __future__ import annotations

import sys
from pathlib import Path

from mens.errors import ConfigError


def parse(cells) -> list[tuple[str, str]]:
    """`afk.cells` → [(rung, spoke)], each checked against the shipped options (exit 2)."""
    from mens.config.options import spokes
    from mens.resources import option_names

    rungs = [r for r in option_names("rung") if r != "hf"]
    known_spokes = spokes()
    out: list[tuple[str, str]] = []
    for cell in cells:
        rung, sep, spoke = str(cell).partition("/")
        if not sep or rung not in rungs or spoke not in known_spokes:
            what = (f"rung `{rung}` is not one of {', '.join(rungs)}" if sep and rung not in rungs
                    else f"spoke `{spoke}` is not one of {', '.join(known_spokes)}" if sep
                    else "a cell is `rung/spoke`")
            raise ConfigError(f"`afk.cells` has `{cell}`: {what} (e.g. "
                              f"`afk.cells=[tiny/vox_lang,tiny/mcp_tool_chain]`).",
                              key="afk.cells")
        if (rung, spoke) not in out:
            out.append((rung, spoke))
    return out


def overrides(rung: str, spoke: str, extra) -> list[str]:
    """The cell's training command line (after `python -m mens`): its rung, spoke, then
    afk.overrides, so an override there wins over nothing the cell needs."""
    return [f"+rung={rung}", f"spoke={spoke}", *[str(o) for o in extra]]


def compose_cell(rung: str, spoke: str, extra):
    return compose_list(overrides(rung, spoke, extra))


def plan_cell(rung: str, spoke: str, extra):
    """(spec, plan) of the cell on this machine, nothing loaded (raises MensError)."""
    from mens.plan.spec import compile_run

    return compile_run(compose_cell(rung, spoke, extra), "plan")


def default_cells(cfg) -> list[tuple[str, str, str]]:
    """[(rung, spoke, ladder state)] of every cell mens.ladder says is missing (TRAIN_NOT_RUN,
    or BASE_SNAPSHOT_ABSENT with no run: the item downloads the base) or STALE, and whose plan
    fits. The ladder plans on the cells' own command line (afk.overrides: hw, lane, …) and
    looks for runs under ladder.runs, which should hold afk.dir (the default does)."""
    from mens.ladder.state import ladder

    lcfg = compose_list(list(cfg.afk.overrides))
    lcfg.ladder.runs = cfg.ladder.runs
    runs, home = Path(cfg.ladder.runs).resolve(), Path(cfg.afk.dir).resolve()
    if runs != home and runs not in home.parents:
        print(f"mens: note: afk.dir={cfg.afk.dir} is not under ladder.runs={cfg.ladder.runs}: "
              f"the ladder does not see this queue's runs", file=sys.stderr)
    out = []
    for c in ladder(lcfg)["cells"]:
        missing = c["state"] == "TRAIN_NOT_RUN" or (c["state"] == "BASE_SNAPSHOT_ABSENT"
                                                    and c["run"] is None)
        if (missing or c["state"] == "STALE") and c["plan_fits"]:
            out.append((c["rung"], c["spoke"], c["state"]))
    return out


def compose_list(overrides: list[str]):
    from mens.config.compose import compose

    return compose(overrides)
