"""Evals' run comparison (mens.compare's across-runs mode over two real tiny runs) and
Topology's compute hub (the local plan and mens.cloud.estimate's cheapest offers for a cell),
against the real app."""
from __future__ import annotations

import shutil

import pytest
from fastapi.testclient import TestClient

from mens.config.compose import compose
from mens.studio.app import build_app


@pytest.fixture()
def client(tmp_path):
    cfg = compose(["+hw=cpu", f"studio.runs={tmp_path / 'runs'}"])
    with TestClient(build_app(cfg, "127.0.0.1", 8090), base_url="http://127.0.0.1:8090") as c:
        yield c, tmp_path / "runs"


def test_compute_hub_plans_locally_and_prices_offers(client):
    c, _ = client
    r = c.get("/api/compute", params={"cell": "tiny/vox_lang", "top": 3})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["local"]["hw"] == "cpu" and d["local"]["fits"] and d["local"]["peak_bytes"] > 0
    assert 1 <= len(d["offers"]) <= 3 and d["offers"][0]["fits"]
    costs = [o["est_cost_usd"] for o in d["offers"] if o["fits"]]
    assert costs == sorted(costs)                 # cheapest first
    assert d["command"] == "mens cloud estimate +rung=tiny spoke=vox_lang"
    assert c.get("/api/compute", params={"cell": "../x"}).status_code == 400


def test_compare_two_finished_runs(client, tiny_run):
    c, runs = client
    for name in ("a", "b"):     # the same real run twice: a comparison needs two run dirs
        shutil.copytree(tiny_run, runs / name, ignore=shutil.ignore_patterns("checkpoints"))
    r = c.post("/api/evals/compare", json={"runs": ["a", "b"]})
    assert r.status_code == 200, r.text
    d = r.json()
    assert [x["id"] for x in d["runs"]] == ["a", "b"] and d["runs"][0]["finished"]
    assert d["runs"][0]["final_loss"] == d["runs"][1]["final_loss"]
    assert "| final train loss |" in d["markdown"]
    assert (runs / d["out"] / "loss_curves.png").is_file()
    assert c.post("/api/evals/compare", json={"runs": ["a"]}).status_code == 400
