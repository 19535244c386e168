"""The studio fuzzed by schemathesis over its own OpenAPI schema (issue #25): the real app,
uvicorn on 127.0.0.1; every operation's generated requests answered below 500, none hanging,
and nothing written outside the studio's roots (runs, datasets, recipes).

POST /api/jobs is left out: an empty body is a valid request that starts a real training run
(its refusals are tested in test_guard.py and test_jobs_api.py)."""
from __future__ import annotations

import pytest

from mens.config.compose import compose
from mens.studio.app import build_app
from schema_fuzz import fuzz
from serve_util import serving

pytestmark = pytest.mark.slow


def files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_no_5xx_no_hang_and_nothing_outside_its_roots(tmp_path, monkeypatch):
    roots = {n: tmp_path / n for n in ("runs", "datasets", "recipes")}
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "keep.txt").write_text("untouched")
    monkeypatch.chdir(tmp_path)
    cfg = compose(["+hw=cpu", f"studio.runs={roots['runs']}",
                   f"studio.datasets={roots['datasets']}", f"studio.recipes={roots['recipes']}"])
    outside = [f for f in files(tmp_path) if not f.startswith(tuple(roots))]
    app = build_app(cfg, "127.0.0.1", 0)
    with serving(app) as url:
        port = url.rsplit(":", 1)[1]
        app.hosts |= {f"127.0.0.1:{port}"}     # the guard's Host for the port uvicorn took
        ran = fuzz(app, url, examples=20, timeout=120, skip={"POST /api/jobs"})
    assert {"GET /api/jobs", "POST /api/plan", "GET /api/data/records"} <= set(ran), ran
    assert [f for f in files(tmp_path) if not f.startswith(tuple(roots))] == outside
