"""Issue #15: expand → synth → oracle → repair → pairs → curate for the shell (bash -n), tool-call
(JSON Schema) and Vox spokes, against a real OpenAI-compatible server on 127.0.0.1 replaying
fixtures/<spoke>.json (well-formed replies, malformed JSON, answers that fail the oracle,
repairs that pass and one that never does)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from datastudio.studio_util import KEY_ENV, teacher_args

from mens.cli.data import main
from mens.synth.dataset import read_jsonl

# spoke → (leaves, records, pairs, quarantined, invalid teacher replies, dropped samples)
EXPECT = {"structured_shell": (3, 5, 2, 2, 1, 0),
          "mcp_tool_chain": (2, 4, 1, 1, 0, 1),
          "vox_lang": (2, 4, 1, 0, 1, 0)}


def build(studio, spoke, out, *extra):
    with studio(spoke) as srv:
        t = [*teacher_args(srv, out), f"spoke={spoke}"]
        assert main(["tree", "expand", *t, "tree.depth=1", "tree.branching=3"]) == 0
        assert main(["synth", *t, "synth.per_leaf=3", *extra]) == 0
        return srv.requests


def grep_key(root: Path, key: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]


@pytest.mark.parametrize("spoke", list(EXPECT))
def test_pipeline_per_spoke(studio, key, tmp_path, spoke):
    out = tmp_path / "ds"
    requests = build(studio, spoke, out)
    leaves, n_rec, n_pairs, n_quar, invalid, dropped = EXPECT[spoke]
    recs, pairs = read_jsonl(out / "records.jsonl"), read_jsonl(out / "pairs.jsonl")
    quar = read_jsonl(out / "quarantine.jsonl")
    assert (len(recs), len(pairs), len(quar)) == (n_rec, n_pairs, n_quar)
    assert all(r["authorized"] for r in requests)            # the key was sent every time
    assert {r["body"]["response_format"]["json_schema"]["name"] for r in requests} == \
        {"mens_subtopics", "mens_samples", "mens_repair"}
    # every repair request carried the failed answer and the oracle's diagnostics
    repairs = [r["body"]["messages"][-1]["content"] for r in requests
               if r["body"]["response_format"]["json_schema"]["name"] == "mens_repair"]
    assert repairs and all("Failed answer:" in t and "diagnostics:" in t for t in repairs)
    # provenance, one system prompt, and the repair → pair link
    from mens.config.compose import compose
    system = compose([f"spoke={spoke}"]).spoke.system_prompt
    for r in recs:
        assert r["messages"][0] == {"role": "system", "content": system}
        assert r["origin"] == "topic_tree_synth" and r["strategy"] == "zero_shot"
        assert r["teacher"]["model"] == "replay" and r["oracle"]["passed"] is True
        assert r["verdict"] in ("passed", "repaired") and r["created_at"] and r["topic"]
    repaired = [r for r in recs if r["verdict"] == "repaired"]
    assert len(repaired) == n_pairs and all(r["repair_turns"] >= 1 for r in repaired)
    for p in pairs:
        assert p["diagnostics"] and p["chosen"][0]["content"] != p["rejected"][0]["content"]
        assert any(r["messages"][-1]["content"] == p["chosen"][0]["content"] for r in repaired)
    assert all(q["reason"] for q in quar)
    stats = json.loads((out / "stats.json").read_text())
    teacher = stats["teacher"]["teachers"]["endpoint"]
    assert teacher["invalid_json"] == invalid and teacher["samples_dropped"] == dropped
    assert stats["teacher"]["totals"]["prompt_tokens"] > 0
    tree = (out / "tree.yaml").read_text()
    assert tree.count("verified:") == leaves + 1
    assert not grep_key(tmp_path, key)                       # the key is in no file written
    # readable as is by data=file (SFT) and lane=dpo (pairs)
    from mens.data.sources import load_records
    sft, fmt, _, _ = load_records({"source": "file", "path": str(out / "records.jsonl")})
    assert fmt == "messages" and len(sft) == n_rec
    dpo, fmt, _, _ = load_records({"source": "file", "path": str(out / "pairs.jsonl")})
    assert fmt == "preference" and len(dpo) == n_pairs


def test_curate_rates_tags_edits_and_filters(studio, tmp_path, capsys):
    out = tmp_path / "ds"
    with studio("structured_shell") as srv:
        t = [*teacher_args(srv, out), "spoke=structured_shell"]
        assert main(["tree", "expand", *t, "tree.depth=1", "tree.branching=3"]) == 0
        assert main(["synth", *t, "synth.per_leaf=3"]) == 0
        assert main(["curate", "rate", *t, "curate.topic=jq extraction", "curate.rating=5"]) == 0
        assert main(["curate", "tag", *t, "curate.verdict=repaired",
                     "curate.tags=[canary]"]) == 0
        assert main(["curate", "rate", *t, "curate.rating=4"]) == 2       # no filter: refused
        first = read_jsonl(out / "records.jsonl")[0]
        assert main(["curate", "edit", *t, f"curate.id={first['id']}",
                     "curate.response=edited answer"]) == 0
        capsys.readouterr()
        assert main(["curate", "list", *t, "curate.min_rating=5"]) == 0
    recs = {r["id"]: r for r in read_jsonl(out / "records.jsonl")}
    assert "3 of 5 records" in capsys.readouterr().out
    assert [r["rating"] for r in recs.values()].count(5) == 3
    assert all("canary" in r["tags"] for r in recs.values() if r["verdict"] == "repaired")
    edited = recs[first["id"]]
    assert edited["messages"][-1]["content"] == "edited answer"
    assert edited["edits"][0]["original"] == first["messages"][-1]["content"]


def test_clean_removes_near_duplicates_and_eval_contamination(tmp_path):
    from mens.config.compose import compose
    from mens.data.corpus import load_eval
    from mens.synth.curate import clean_dataset
    from mens.synth.dataset import write_jsonl

    cfg = compose(["spoke=structured_shell", f"synth.out={tmp_path}"])
    ev = load_eval(cfg.spoke)[0]
    base = ("find all json files under the data directory, read each one with jq, keep the "
            "objects whose status is active, print their names and sizes as one json list, and "
            "say how many there were at the end of the run")

    def rec(i, text):
        return {"id": f"r{i}", "messages": [{"role": "user", "content": text},
                                            {"role": "assistant", "content": "ok " + text}],
                "tags": ["train_sft"]}
    write_jsonl(tmp_path / "records.jsonl", [
        rec(0, base), rec(1, base + " please"), rec(2, "something else entirely, a unique task"),
        {**ev, "id": "leak", "tags": ["train_sft"]}])
    result = clean_dataset(cfg, tmp_path)
    kept = [r["id"] for r in read_jsonl(tmp_path / "records.jsonl")]
    assert kept == ["r0", "r2"] and result["near_duplicates"] == 1 and result["contaminated"] == 1
    reasons = [q["reason"] for q in read_jsonl(tmp_path / "quarantine.jsonl")]
    assert reasons[0] == "near-duplicate of r0" and reasons[1].startswith("contaminated")


def test_wrong_key_exits_2_and_bad_input_exits_2(studio, tmp_path, monkeypatch, capsys):
    out = tmp_path / "ds"
    with studio("vox_lang") as srv:
        t = [*teacher_args(srv, out), "spoke=vox_lang"]
        monkeypatch.setenv(KEY_ENV, "sk-wrong")
        assert main(["tree", "expand", *t]) == 2
        assert "401" in capsys.readouterr().err
        assert all(not r["authorized"] for r in srv.requests)
        assert main(["synth", *t, "synth.strategy=many_shot"]) == 2
        assert main(["synth", *t[:-1], "spoke=no_such_spoke", f"synth.out={out}"]) == 2
        capsys.readouterr()
        out.mkdir(exist_ok=True)
        (out / "tree.yaml").write_text("spoke: vox_lang\nroot:\n  id: root\n  label: vox\n"
                                       "  children:\n    - {id: a, label: A, difficulty: [5, 2]}\n")
        assert main(["synth", *t]) == 2
        err = capsys.readouterr().err
        assert "tree.yaml" in err and "root.children[0].difficulty" in err
        (out / "tree.yaml").write_text("spoke: vox_lang\nroot: [unclosed\n")
        assert main(["tree", "expand", *t]) == 2
        assert "tree.yaml:" in capsys.readouterr().err


def test_tree_prune_add_regen(studio, tmp_path):
    from mens.synth.tree import load

    out = tmp_path / "ds"
    with studio("structured_shell") as srv:
        t = [*teacher_args(srv, out), "spoke=structured_shell"]
        assert main(["tree", "expand", *t, "tree.depth=1", "tree.branching=2"]) == 0
        ids = [n.id for n, _ in load(out / "tree.yaml").nodes()]
        assert ids == ["root", "jq-extraction", "safe-deletes"]
        assert main(["tree", "prune", *t, "tree.node=safe-deletes"]) == 0
        assert main(["tree", "add", *t, "tree.node=root", "tree.label=Here docs"]) == 0
        assert main(["tree", "regen", *t, "tree.node=root", "tree.depth=1",
                     "tree.branching=3"]) == 0
        sub = [r for r in srv.requests
               if r["body"]["response_format"]["json_schema"]["name"] == "mens_subtopics"]
    ids = [n.id for n, _ in load(out / "tree.yaml").nodes()]
    assert ids == ["root", "jq-extraction", "safe-deletes", "process-listing"]
    assert len(sub) == 2


def test_cot_distill_keeps_reasoning_out_of_the_answer(key, tmp_path):
    from teacher_server import replay_server

    reply = {"json": {"samples": [{"prompt": "Count lines of a.txt.", "response":
                                   "<think>wc counts lines</think>```bash\nwc -l < a.txt\n```"}]}}
    for keep in (False, True):
        out = tmp_path / f"ds{keep}"
        with replay_server([{"model": "*", "replies": [reply]}], api_key=key) as srv:
            assert main(["synth", *teacher_args(srv, out), "spoke=structured_shell",
                         "synth.strategy=cot_distill", f"synth.keep_reasoning={keep}"]) == 0
            assert "<think>" in srv.requests[0]["body"]["messages"][-1]["content"]
        (r,) = read_jsonl(out / "records.jsonl")
        assert r["messages"][-1]["content"] == "```bash\nwc -l < a.txt\n```"
        assert r["messages"][-1].get("reasoning_content") == ("wc counts lines" if keep else None)
        assert r.get("reasoning") == (None if keep else "wc counts lines")
