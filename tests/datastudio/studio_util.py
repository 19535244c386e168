"""Shared by the data-studio tests (a module of its own: `conftest` names the root one too)."""
from __future__ import annotations

KEY_ENV = "MENS_TEST_STUDIO_KEY"


def teacher_args(srv, out) -> list[str]:
    """`teacher=endpoint` at the replay server, its key's variable, the dataset dir."""
    return ["teacher=endpoint", f"teacher.base_url={srv.base_url}", "teacher.model=replay",
            f"teacher.api_key_env={KEY_ENV}", "teacher.backoff_s=0.01", "teacher.max_retries=1",
            f"synth.out={out}"]
