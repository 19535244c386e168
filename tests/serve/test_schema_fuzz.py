"""mens.serve fuzzed by schemathesis over its own OpenAPI schema (issue #25): the real app over
real Slots (tiny base + the tiny run's adapter), uvicorn on 127.0.0.1; every operation's
generated requests answered below 500, none hanging, and the server healthy afterwards."""
from __future__ import annotations

import httpx
import pytest

from schema_fuzz import fuzz
from serve_util import serving

pytestmark = pytest.mark.slow   # bounded, but hundreds of requests with generations on CPU


def test_no_5xx_and_no_hang_over_the_schema(tiny_run):
    from mens.run.rundir import RunDir
    from mens.serve.openai_api import build_app
    from mens.serve.slots import Slots, Source

    slots = Slots(RunDir(tiny_run).read_spec()["rung"], [Source.parse(str(tiny_run))],
                  device="cpu")
    try:
        app = build_app(slots, default_max_tokens=4)
        with serving(app) as url:
            ran = fuzz(app, url, examples=25, timeout=120)
            assert {"POST /v1/chat/completions", "POST /v1/completions", "GET /health"} <= \
                set(ran), ran
            assert all(n > 0 for n in ran.values()), ran
            assert httpx.get(f"{url}/health", timeout=30).json()["status"] == "ok"
    finally:
        slots.close()
