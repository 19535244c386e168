"""The dev extra's TRL floor is the TRL the objective tests check mens's losses against. Issue
#37: it said trl>=0.20 while tests/objective imports TRL 1.x modules (trl.experimental.cpo and
.orpo; KTOTrainer at the top level since 1.8) and compares with its trainers' private loss code
as it stands in the version the docs name (docs/guides/rl.md) — an older TRL installs and then fails there.

Read from pyproject.toml through setuptools' own reader, as tests/cli/test_shipped.py does."""
from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from setuptools.config.pyprojecttoml import read_configuration

ROOT = Path(__file__).resolve().parents[2]


def test_the_dev_trl_floor_is_the_trl_the_losses_are_checked_against():
    dev = read_configuration(ROOT / "pyproject.toml")["project"]["optional-dependencies"]["dev"]
    (req,) = [r for r in map(Requirement, dev) if canonicalize_name(r.name) == "trl"]
    floors = [Version(s.version) for s in req.specifier if s.operator == ">="]
    assert len(floors) == 1, f"one `>=` floor for trl in the dev extra: {req}"
    claim = re.search(r"Each loss equals TRL (\d+\.\d+)'s on the same batch",
                      (ROOT / "docs/guides/rl.md").read_text(encoding="utf-8"))
    assert claim, "the RL guide names the TRL version the losses are checked against"
    assert floors[0] == Version(claim.group(1)), (str(req), claim.group(0))
    installed = metadata.version("trl")       # the dev extra is what the test suite runs with
    assert req.specifier.contains(installed), (installed, str(req))
