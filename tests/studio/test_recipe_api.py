"""The Recipe's lane as method × objective: /api/options lists both axes from mens's own
tables (the page spells none), the overrides the page builds from them plan to that lane (and a
saved recipe composes to it again), and an objective the spoke cannot feed gets the planner's
paragraph (400 from /api/plan, no job launched) instead of a silent failure. Planned, never
trained."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from mens.config.compose import compose
from mens.config.objectives import CARDS, WANT
from mens.config.schema import METHODS, OBJECTIVES
from mens.studio.app import build_app

BASE = ["+hw=cpu", "+rung=tiny"]


@pytest.fixture()
def client(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # ./conf/recipe: where `save as recipe` writes, +recipe= reads
    cfg = compose(["+hw=cpu", f"studio.runs={tmp_path / 'runs'}"])
    with TestClient(build_app(cfg, "127.0.0.1", 8090), base_url="http://127.0.0.1:8090") as c:
        yield c, tmp_path


def test_options_list_the_methods_and_objectives(client):
    c, _ = client
    o = c.get("/api/options").json()
    assert o["method"] == list(METHODS) and o["objective"] == list(OBJECTIVES)
    assert [m["option"] for m in o["methods"]] == list(METHODS)   # SFT on a method: its file
    by = {x["name"]: x for x in o["objectives"]}
    assert by["sft"]["option"] is None
    for name in OBJECTIVES[1:]:   # each objective's option file builds on lora
        assert by[name]["option"] == name and by[name]["method"] == "lora"
    for name, card in CARDS.items():
        assert by[name]["record"] == card.record and WANT[card.record] in by[name]["hint"]
    assert {n for n, x in by.items() if x["reference"]} == {"dpo", "kto", "grpo"}
    assert "spoke with preference pairs" in by["dpo"]["hint"]
    assert "oracle" in by["grpo"]["hint"] and "grpo.beta > 0" in by["grpo"]["hint"]


@pytest.mark.parametrize("lane, want", [
    (["lane=dpo", "lane.method=qlora"], ("qlora-dpo", "qlora", "dpo")),   # qlora × dpo
    (["lane=qlora"], ("qlora", "qlora", "sft")),                          # a recipe's lane=qlora
])
def test_the_pages_lane_overrides_plan_and_save_to_that_lane(client, lane, want):
    c, tmp = client
    over = [*BASE, "spoke=skill_creation", *lane]
    p = c.post("/api/plan", json={"overrides": over})
    assert p.status_code == 200, p.text
    p = p.json()
    assert (p["lane"], p["method"], p["objective"]) == want
    assert p["cell"] == f"cpu/{want[0]}/nockpt/fp32" and p["verdict"] == "fits"
    name = "_".join(want[1:])
    r = c.post("/api/recipes", json={"name": name, "overrides": over})
    assert r.status_code == 200, r.text
    saved = compose([f"+recipe={name}"])
    assert (saved.lane.method, saved.lane.objective) == want[1:]


def test_an_objective_the_spoke_cannot_feed_is_refused_with_the_planners_paragraph(client):
    c, tmp = client
    over = [*BASE, "spoke=vox_lang", "lane=dpo", "lane.method=qlora"]
    r = c.post("/api/plan", json={"overrides": over})
    assert r.status_code == 400
    msg = r.json()["error"]
    assert "lane.objective=dpo" in msg and "vox_lang ships none" in msg
    assert "skill_creation" in msg   # the way out: a spoke with pairs
    r = c.post("/api/jobs", json={"overrides": over})
    assert r.status_code == 400 and r.json()["error"] == msg
    assert not (tmp / "runs" / "studio-jobs").exists()   # nothing launched
