"""`mens fit`: calibration records → fitted cells written into a contract (or checked against
it, `calibrate.check=true`) → the report. The fitting itself is mens.calibrate.fit."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from mens.calibrate.fit import fit
from mens.calibrate.records import collect, resolve
from mens.errors import EXIT_CONFIG, EXIT_FAILED, EXIT_OK, ConfigError
from mens.plan.memory import load_contract
from mens.resources import CONTRACT, SOURCE_CHECKOUT
from mens.run.rundir import atomic_write


def write_contract(path: Path, cells: dict, speed: dict | None = None) -> None:
    """Rewrite only the `cells:` section and (given) the `speed:` one (the model's comments
    stay), atomically. A contract file that does not exist yet starts as a copy of the shipped
    one."""
    import yaml

    text = (path if path.is_file() else CONTRACT).read_text()
    head, sep, _ = text.partition("\ncells:")
    if not sep:
        raise ConfigError(f"{path} has no `cells:` section to write the fit into.")
    pre, found, post = head.partition("\nspeed:")
    if speed is not None and found:   # the block runs to the first blank line
        rest = post.split("\n\n", 1)
        head = (pre + "\n" + yaml.safe_dump({"speed": speed}, sort_keys=False, width=100,
                                            allow_unicode=True).rstrip("\n")
                + ("\n\n" + rest[1] if len(rest) > 1 else ""))
    body = yaml.safe_dump({"cells": cells}, sort_keys=False, width=100, allow_unicode=True)
    atomic_write(path, head + "\n" + body)
    load_contract.cache_clear()


def check(result: dict, contract) -> tuple[bool, list[str]]:
    """A fresh fit against the contract's cells: each coefficient inside its stated uncertainty."""
    ok, lines = True, []
    for key, old in sorted((contract.get("cells") or {}).items()):
        new = result["cells"].get(key)
        if not new:
            ok = False
            lines.append(f"{key}: not re-derived ({result['refused'].get(key, 'no records')})")
            continue
        for t, term in old.get("terms", {}).items():
            got = new["terms"].get(t, {}).get("coefficient", 1.0)
            inside = abs(got - term["coefficient"]) <= term["uncertainty"]
            ok &= inside
            lines.append(f"{key} {t}: {got:.4f} vs committed {term['coefficient']:.4f} "
                         f"± {term['uncertainty']:.4f} → {'inside' if inside else 'OUTSIDE'}")
    return ok, lines


def fit_target(given: str | None) -> Path:
    """Where the fitted contract goes: calibrate.out or plan.contract; by default the shipped
    contract only in a source checkout — an installed mens is never written to."""
    if given:
        return resolve(given)
    if SOURCE_CHECKOUT:
        return CONTRACT
    raise ConfigError("mens fit writes a contract, and the shipped one is part of the installed "
                      "package: name a file of your own with `calibrate.out=my_contract.yaml` "
                      "(it starts as a copy of the shipped contract), then plan with "
                      "`plan.contract=my_contract.yaml`; `calibrate.check=true` writes nothing.",
                      key="calibrate.out")


def task(cfg, out_dir: Path) -> int:
    from mens.calibrate.report import report

    c = cfg.calibrate
    records, problems = collect(list(c.records))
    for p in problems:
        print(f"mens fit: {p}", file=sys.stderr)
    if not records:
        raise ConfigError(f"no calibration records in {list(c.records)}: run `make calibrate` "
                          f"or point calibrate.records at run dirs / a records JSONL.",
                          key="calibrate.records")
    target = fit_target(c.out or cfg.plan.contract)
    contract = load_contract(str(target) if target.is_file() else None)
    result = fit(records, contract)
    if c.save_records:
        atomic_write(resolve(c.save_records), "".join(json.dumps(r) + "\n" for r in records))
    for key, msg in result["refused"].items():
        print(f"mens fit: refused: {msg}", file=sys.stderr)
    code = EXIT_OK
    if c.check:
        ok, lines = check(result, contract)
        print("\n".join(["check against the contract:", *lines, f"check: {'PASS' if ok else 'FAIL'}"]))
        code = EXIT_OK if ok else EXIT_FAILED
        fitted = {**contract, "cells": result["cells"]}
    else:   # new cells replace theirs; cells these records do not touch stay as they were
        write_contract(target, {**(contract.get("cells") or {}), **result["cells"]},
                       result.get("speed"))
        fitted = load_contract(str(target))
        print(f"mens fit: wrote {len(result['cells'])} cell(s) to {target}")
    report(records, fitted, result, Path(c.report) if c.report else out_dir, problems)
    return code or (EXIT_CONFIG if result["refused"] else EXIT_OK)   # a refused cell: bad input
