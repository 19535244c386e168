"""mens.serve's tiny model as the teacher of a whole data-studio run (tree expand, then synth):
its answers are garbage, which is counted per teacher and rejected; nothing crashes and no
record is made of it."""
from __future__ import annotations

import json

from mens.cli.data import main
from mens.synth.dataset import read_jsonl
from serve_util import running_server


def test_tiny_mens_serve_as_the_teacher_of_a_synthesis_run(tmp_path):
    out = tmp_path / "ds"
    with running_server(tmp_path, "+hw=cpu") as (url, _):
        t = ["teacher=endpoint", f"teacher.base_url={url}/v1", "teacher.model=base",
             "teacher.max_tokens=24", "teacher.backoff_s=0", "teacher.concurrency=2",
             "spoke=structured_shell", f"synth.out={out}"]
        assert main(["tree", "expand", *t, "tree.depth=1", "tree.branching=2"]) == 0
        assert main(["synth", *t, "synth.per_leaf=2"]) == 0
    stats = json.loads((out / "stats.json").read_text())
    s = stats["teacher"]["teachers"]["endpoint"]
    assert s["calls"] >= 1 and s["ok"] == 0
    assert s["invalid_json"] + s["schema_violations"] == s["calls"]    # every reply counted
    assert s["mode"] == "prompt" and s["completion_tokens"] > 0       # it did answer, badly
    assert read_jsonl(out / "records.jsonl") == [] and read_jsonl(out / "pairs.jsonl") == []
    assert stats["merged"]["quarantine"] == len(read_jsonl(out / "quarantine.jsonl")) >= 1
