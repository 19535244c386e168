"""The Data panel's API on a real dataset dir: prune a topic-tree node (through the real
`python -m mens.data tree prune` child), expand without a teacher (the command is given back,
nothing runs), and tag / untag / edit a record in place (mens.synth.curate)."""
from __future__ import annotations

import json

import pytest
import yaml
from fastapi.testclient import TestClient

from mens.config.compose import compose
from mens.synth.tree import Node, Tree
from mens.studio.app import build_app


@pytest.fixture()
def client(tmp_path, monkeypatch):
    for k in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY"):
        monkeypatch.delenv(k, raising=False)   # no teacher here
    d = tmp_path / "datasets" / "mine"
    tree = Tree("vox_lang", Node(id="root", label="vox_lang"), d / "tree.yaml")
    for label in ("loops", "strings"):
        tree.add_child(tree.root, label)
    tree.add_child(tree.root.children[0], "nested loops")
    tree.save()
    rec = {"id": "r1", "topic": ["loops"], "verdict": "passed", "tags": ["keep"],
           "messages": [{"role": "user", "content": "count to 3"},
                        {"role": "assistant", "content": "1 2 3"}]}
    (d / "records.jsonl").write_text(json.dumps(rec) + "\n")
    cfg = compose(["+hw=cpu", f"studio.runs={tmp_path / 'runs'}",
                   f"studio.datasets={tmp_path / 'datasets'}"])
    with TestClient(build_app(cfg, "127.0.0.1", 8090), base_url="http://127.0.0.1:8090") as c:
        yield c, d


def ids(node):
    return [node["id"]] + [i for k in node.get("children") or [] for i in ids(k)]


def test_tree_prune_expand_and_records_in_place(client):
    c, d = client
    t = c.get("/api/data/records", params={"name": "mine"}).json()["tree"]
    assert ids(t["root"]) == ["root", "loops", "loops/nested-loops", "strings"]
    r = c.post("/api/data/tree", json={"name": "mine", "action": "prune", "node": "loops"})
    assert r.status_code == 200 and r.json()["ran"], r.text
    assert ids(yaml.safe_load((d / "tree.yaml").read_text())["root"]) == ["root", "strings"]
    r = c.post("/api/data/tree", json={"name": "mine", "action": "prune", "node": "nope"})
    assert r.status_code == 400 and "no node `nope`" in r.json()["error"]
    before = (d / "tree.yaml").read_text()
    r = c.post("/api/data/tree", json={"name": "mine", "action": "expand", "node": "strings"})
    assert r.status_code == 200 and not r.json()["ran"]
    assert r.json()["command"].startswith("mens data tree expand synth.out=")
    assert "tree.node=strings" in r.json()["command"]
    assert (d / "tree.yaml").read_text() == before   # nothing ran
    for action, extra in (("tag", {"tags": ["gold"]}), ("untag", {"tags": ["keep"]}),
                          ("edit", {"response": "one two three"})):
        r = c.post("/api/data/curate", json={"name": "mine", "id": "r1", "action": action,
                                             **extra})
        assert r.status_code == 200, r.text
    rec = c.get("/api/data/records", params={"name": "mine"}).json()["records"][0]
    assert rec["tags"] == ["gold"] and rec["answer"] == "one two three"
