"""Fixtures of the teacher tests: the replay server (tests/teacher_server.py) with a fresh key,
and Teachers built from config dicts that point at it (teacher_util)."""
from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from teacher_server import replay_server
from synth.teacher.teacher_util import KEY_ENV, teacher_cfg

FIXTURE = Path(__file__).parent / "fixtures" / "replies.json"


@pytest.fixture
def key(monkeypatch):
    """A fresh secret in $MENS_TEST_TEACHER_KEY, the one the server accepts."""
    value = "sk-test-" + secrets.token_hex(16)
    monkeypatch.setenv(KEY_ENV, value)
    return value


@pytest.fixture
def server(key):
    with replay_server(FIXTURE, api_key=key) as srv:
        yield srv


@pytest.fixture
def make_teacher():
    from mens.synth.teacher import Teacher

    def make(*candidates: dict, **settings):
        return Teacher.from_config(teacher_cfg(*candidates, **settings))
    return make
