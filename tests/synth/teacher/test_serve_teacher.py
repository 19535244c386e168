"""mens.serve's tiny model as the teacher, for real: `python -m mens.serve` (the tiny rung's
base, no run needed) on a free 127.0.0.1 port, through `teacher=endpoint`. It refuses
response_format (400), so the schema goes into the prompt; its answers are garbage, which is
counted and rejected — the batch finishes, nothing raises."""
from __future__ import annotations

import json

from mens.synth.teacher import Teacher
from serve_util import running_server

ASK = [{"role": "system", "content": "You write training samples for the Vox language."},
       {"role": "user", "content": "Give two samples about printing numbers."}]


def test_tiny_mens_serve_as_teacher_garbage_is_counted(compose, tmp_path):
    with running_server(tmp_path, "+hw=cpu") as (url, _):
        cfg = compose(["teacher=endpoint", f"teacher.base_url={url}/v1", "teacher.model=base",
                       "teacher.max_tokens=24", "teacher.concurrency=2", "teacher.backoff_s=0"])
        t = Teacher.from_config(cfg.teacher)
        replies = t.ask_many([("mens_samples", ASK, {"seed": i}) for i in range(3)]
                             + [("mens_subtopics", ASK), ("mens_repair", ASK)])
    assert len(replies) == 5 and not any(r.ok for r in replies)
    assert all(r.model == "base" and r.mode == "prompt" and r.problems for r in replies)
    s = t.ledger.as_dict()["teachers"]["endpoint"]
    assert s["calls"] == 10                  # each prompt-mode reply was asked once more
    assert s["ok"] == 0 and s["invalid_json"] + s["schema_violations"] == 10
    assert s["completion_tokens"] > 0 and s["fallthroughs"] == 0 and s["cost_usd"] is None
    assert any("refused response_format (400)" in n for n in s["notes"])
    t.ledger.write(tmp_path / "teacher_stats.json")
    assert json.loads((tmp_path / "teacher_stats.json").read_text())["totals"]["calls"] == 10
