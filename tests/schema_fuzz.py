"""Schemathesis over a FastAPI app's own OpenAPI schema, against the real server on 127.0.0.1:
every operation gets `examples` generated cases (hypothesis, no example database), each one
answered below 500 within `timeout` seconds (a hang fails). Shared by the serve and studio
fuzz tests (a module of its own: only tests/conftest.py is imported by name)."""
from __future__ import annotations

import requests


def fastapi_of(app):
    """The FastAPI app inside mens's ASGI wrappers (serve's Limits, the studio's Guard)."""
    while not hasattr(app, "openapi"):
        app = app.app
    return app


def fuzz(app, url: str, examples: int, timeout: float = 60, skip=(), headers=None) -> dict:
    """{operation: cases run}; raises AssertionError naming the case on any 5xx or hang."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings

    schema = schemathesis.openapi.from_dict(fastapi_of(app).openapi())
    ran: dict[str, int] = {}
    session = requests.Session()
    for result in schema.get_all_operations():
        op = result.ok()
        label = f"{op.method.upper()} {op.path}"
        if label in skip:
            continue
        ran[label] = 0

        @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy())
        def one(case):
            ran[label] += 1
            try:
                r = case.call(base_url=url, session=session, timeout=timeout, headers=headers)
            except requests.Timeout:
                raise AssertionError(f"{label}: no answer in {timeout} s to {case.path_parameters}"
                                     f" {case.query} {case.body!r:.200}") from None
            assert r.status_code < 500, (label, r.status_code, r.text[:500], case.body)
        one()
    return ran
