"""Hostile requests against the real app (no browser): foreign Host / Origin, path traversal,
huge bodies, a missing or wrong token — each a 4xx, and nothing changed on disk."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from mens.config.compose import compose
from mens.studio.app import build_app


def tree(root):
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in root.rglob("*"))


@pytest.fixture()
def client(tmp_path):
    runs = tmp_path / "runs"
    cfg = compose(["+hw=cpu", f"studio.runs={runs}", f"studio.recipes={tmp_path / 'recipes'}",
                   f"studio.datasets={tmp_path / 'datasets'}", "studio.max_body_bytes=4096"])
    (runs / "a_run").mkdir(parents=True)
    (runs / "a_run" / "telemetry.jsonl").write_text('{"event": "TRAIN_STEP", "step": 1}\n')
    (tmp_path / "secret.txt").write_text("not yours")
    app = build_app(cfg, "127.0.0.1", 8090)
    with TestClient(app, base_url="http://127.0.0.1:8090") as c:
        yield c, tmp_path


def test_hostile_requests_are_refused_and_change_nothing(client):
    c, root = client
    before = tree(root)
    ok = c.post("/api/plan", json={"overrides": ["+hw=cpu", "train.seq_len=128"]})
    assert ok.status_code == 200 and ok.json()["fits"]
    # DNS rebinding: a foreign name in Host
    assert c.get("/api/jobs", headers={"host": "evil.example:8090"}).status_code == 403
    # a cross-site post, by Origin and by Sec-Fetch-Site
    r = c.post("/api/jobs", json={"overrides": ["+hw=cpu"]},
               headers={"origin": "http://evil.example"})
    assert r.status_code == 403
    r = c.post("/api/recipes", json={"name": "x", "overrides": []},
               headers={"sec-fetch-site": "cross-site"})
    assert r.status_code == 403
    # path traversal in run names
    for bad in ("../secret.txt", "../../etc", "/etc", "a_run/../../secret.txt", "..%2F.."):
        assert 400 <= c.get("/api/jobs/events", params={"id": bad}).status_code < 500, bad
        assert 400 <= c.post("/api/jobs/control", json={"id": bad, "action": "gate"}
                             ).status_code < 500, bad
    assert c.post("/api/serve/start", json={"runs": ["../secret.txt"]}).status_code == 400
    assert c.get("/static/../app.py").status_code == 404
    # a huge body, declared and undeclared (chunked)
    big = b'{"overrides": ["' + b"x" * 10000 + b'"]}'
    assert c.post("/api/recipes", content=big,
                  headers={"content-type": "application/json"}).status_code == 413
    assert c.post("/api/jobs", content=iter([big[:3000], big[3000:]]),
                  headers={"content-type": "application/json"}).status_code == 413
    # overrides that would reach Hydra's own settings or other commands
    for o in ("hydra.run.dir=/tmp/x", "rerun=../x", "serve.port=1", "-m"):
        assert c.post("/api/jobs", json={"overrides": [o]}).status_code == 400, o
    assert c.post("/api/recipes", json={"name": "../evil", "overrides": []}).status_code == 400
    assert c.post("/api/data/curate", json={"name": "..", "id": "x", "action": "rate",
                                            "rating": 1}).status_code == 404
    assert tree(root) == before


def test_a_token_guards_every_request(tmp_path):
    cfg = compose(["+hw=cpu", f"studio.runs={tmp_path / 'runs'}"])
    app = build_app(cfg, "127.0.0.1", 8090, token="s3cret-token")
    with TestClient(app, base_url="http://127.0.0.1:8090") as c:
        assert c.get("/api/jobs").status_code == 401
        assert c.get("/api/jobs", headers={"authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/api/jobs", headers={"authorization": "Bearer s3cret-token"}
                     ).status_code == 200
        r = c.get("/", params={"token": "s3cret-token"})   # the page sets its cookie
        assert r.status_code == 200 and "HttpOnly" in r.headers["set-cookie"]
        assert c.get("/api/jobs").status_code == 200       # the cookie now


def test_binding_beyond_localhost_needs_a_token_variable(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MENS_TEST_TOKEN"}
    for extra in ([], ["studio.token_env=MENS_TEST_TOKEN"]):
        r = subprocess.run([sys.executable, "-m", "mens.studio", "studio.host=0.0.0.0",
                            "studio.port=0", *extra], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        assert "studio.token_env" in r.stderr
