"""Fixtures of the data-studio tests: the replay server (tests/teacher_server.py) with a fresh
key (studio_util.teacher_args points `teacher=endpoint` at it)."""
from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from teacher_server import replay_server

from datastudio.studio_util import KEY_ENV

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def key(monkeypatch):
    value = "sk-studio-" + secrets.token_hex(16)
    monkeypatch.setenv(KEY_ENV, value)
    return value


@pytest.fixture
def studio(key):
    """(start(fixture) → server context, key)."""
    def start(name: str):
        return replay_server(FIXTURES / f"{name}.json", api_key=key)
    return start
