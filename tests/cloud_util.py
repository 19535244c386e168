"""Shared by the cloud tests (a module of its own: only tests/conftest.py is imported by name)."""
from __future__ import annotations

import json
from pathlib import Path


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())
