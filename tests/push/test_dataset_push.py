"""Issue #29 item 3: `mens data push` of a real synthesized dataset (tree expand → synth → oracle
→ repair → curate against the replay teacher, tests/teacher_server.py) — the assembled folder
loads with `datasets` (local folder: the card's configs) and its card with huggingface_hub, no
key reaches a file, bad input exits 2, and the push to the stand-in Hub (tests/hub_server.py)
loads back with `datasets.load_dataset(repo)`."""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from datastudio.studio_util import KEY_ENV, teacher_args
from teacher_server import replay_server

from mens.cli.data import main
from mens.synth.dataset import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "datastudio" / "fixtures" / "structured_shell.json"
REPO = "mens-test/shell-ds"
KEY = "sk-push-" + secrets.token_hex(16)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A real dataset dir: 3 leaves, 5 records (2 repaired), 2 pairs, 2 quarantined; the
    repaired ones tagged eval_golden, one topic rated 5 — synthesized with a teacher key set."""
    out = tmp_path_factory.mktemp("push") / "ds"
    with pytest.MonkeyPatch.context() as mp, replay_server(FIXTURE, api_key=KEY) as srv:
        mp.setenv(KEY_ENV, KEY)
        t = [*teacher_args(srv, out), "spoke=structured_shell"]
        assert main(["tree", "expand", *t, "tree.depth=1", "tree.branching=3"]) == 0
        assert main(["synth", *t, "synth.per_leaf=3"]) == 0
        assert main(["curate", "tag", *t, "curate.verdict=repaired",
                     "curate.tags=[eval_golden]"]) == 0
        assert main(["curate", "rate", *t, "curate.topic=jq extraction",
                     "curate.rating=5"]) == 0
        assert main(["push", *t, f"push.repo={REPO}", "push.dry_run=true"]) == 0
    return out


def load_local(folder: Path, cache: Path, config: str | None = None):
    import datasets
    return datasets.load_dataset(str(folder), config, cache_dir=str(cache))


def test_assembled_folder_loads_with_datasets(dataset, tmp_path):
    recs = {r["id"]: r for r in read_jsonl(dataset / "records.jsonl")}
    golden = {i for i, r in recs.items() if "eval_golden" in r["tags"]}
    assert len(recs) == 5 and len(golden) == 2
    out = dataset / "push"
    d = load_local(out, tmp_path)
    assert set(d) == {"train", "eval"}
    assert (d["train"].num_rows, d["eval"].num_rows) == (len(recs) - len(golden), len(golden))
    assert set(d["eval"]["id"]) == golden and not golden & set(d["train"]["id"])
    for row in [*d["train"], *d["eval"]]:
        rec = recs[row["id"]]
        assert row["messages"] == rec["messages"]                  # intact, turn for turn
        assert (row["teacher"], row["model"]) == (rec["teacher"]["name"], rec["teacher"]["model"])
        assert row["topic"] == rec["topic"] and row["verdict"] == rec["verdict"]
        assert row["repaired"] == (rec["verdict"] == "repaired")
        assert row["rating"] == rec["rating"] and row["tags"] == rec["tags"]
        assert row["oracle_passed"] is rec["oracle"]["passed"]
    pairs = load_local(out, tmp_path, "pairs")["train"]
    want = {p["id"]: p for p in read_jsonl(dataset / "pairs.jsonl")}
    assert sorted(pairs["id"]) == sorted(want) and len(want) == 2
    for p in pairs:
        assert (p["prompt"], p["chosen"], p["rejected"]) == \
            tuple(want[p["id"]][k] for k in ("prompt", "chosen", "rejected"))
    quar = load_local(out, tmp_path, "quarantine")["train"]
    assert sorted(quar["reason"]) == sorted(q["reason"] for q in
                                            read_jsonl(dataset / "quarantine.jsonl"))
    assert (out / "tree.yaml").read_bytes() == (dataset / "tree.yaml").read_bytes()
    assert json.loads((out / "stats.json").read_text()) == \
        json.loads((dataset / "stats.json").read_text())           # no URL to scrub here
    # the manifest beside the folder names every file uploaded, with its size and sha256
    manifest = json.loads((dataset / "push.json").read_text())
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert {f["path"] for f in manifest["files"]} == files
    for f in manifest["files"]:
        blob = (out / f["path"]).read_bytes()
        assert f["bytes"] == len(blob) and f["sha256"] == hashlib.sha256(blob).hexdigest()
    assert manifest["upload"] == {"dry_run": True}


def test_card_parses_and_carries_the_evidence(dataset):
    from huggingface_hub import DatasetCard

    card = DatasetCard.load(dataset / "push" / "README.md")
    data = card.data.to_dict()
    assert data["task_categories"] == ["text-generation"] and data["license"] == "other"
    assert {"mens", "synthetic", "structured_shell"} <= set(data["tags"])
    assert data["size_categories"] == "n<1K" and data["pretty_name"] and data["language"]
    configs = {c["config_name"]: c for c in data["configs"]}
    assert set(configs) == {"default", "pairs", "quarantine"} and configs["default"]["default"]
    assert [f["split"] for f in configs["default"]["data_files"]] == ["train", "eval"]
    # the stand-in Hub's subset of the Hub's metadata validation (licence `other` needs a name
    # and a link: TERMS.md, uploaded beside the card)
    from hub_server import validate_metadata
    assert validate_metadata(str(card), "dataset") == ([], [])
    assert data["license_link"] == "TERMS.md" and (dataset / "push" / "TERMS.md").is_file()
    body = card.text
    stats = json.loads((dataset / "stats.json").read_text())
    totals = stats["teacher"]["totals"]
    recs = read_jsonl(dataset / "records.jsonl")
    quar = read_jsonl(dataset / "quarantine.jsonl")
    passed = sum(r["verdict"] == "passed" for r in recs)
    repaired = sum(r["verdict"] == "repaired" for r in recs)
    failed = sum(q["reason"] == "never passed the oracle" for q in quar)
    invalid = sum(q["reason"].startswith("teacher output invalid") for q in quar)
    judged = passed + repaired + failed
    # the overall oracle row: passed / repaired / never passed / unverified / invalid / cleaned
    assert (f"| **all** | {passed} | {repaired} | {failed} | 0 | {invalid} | 0 | "
            f"{100 * (passed + repaired) / judged:.0f} % ({passed + repaired}/{judged}) |") in body
    assert f"| endpoint | replay | {len(recs)} | 2 | {len(quar)} |" in body    # per teacher/model
    assert f"{totals['prompt_tokens']} prompt + {totals['completion_tokens']} completion" in body
    rated = sum(r["rating"] == 5 for r in recs)
    assert rated and f"Rated: {rated} of {len(recs)} records, mean 5.00 (5: {rated})" in body
    assert f"`eval_golden` {repaired}" in body
    assert "## Terms of use" in body and "`replay` (teacher `endpoint`" in body
    for leaf in ("jq extraction", "safe deletes", "process listing"):
        assert f"| {leaf} |" in body


def test_same_dataset_same_bytes(dataset, tmp_path):
    """A second assembly of unchanged data writes the same files: a re-push uploads nothing."""
    from mens.config.compose import compose
    from mens.push.dataset import assemble_dataset

    before = json.loads((dataset / "push.json").read_text())["files"]
    copy = tmp_path / "ds"
    shutil.copytree(dataset, copy)
    cfg = compose(["spoke=structured_shell", f"synth.out={copy}", f"push.repo={REPO}"])
    again = assemble_dataset(copy, cfg.push, copy / "push", cfg=cfg, log=lambda _: None)
    assert again["files"] == before


def test_without_golden_records_eval_is_held_out_by_hash_and_urls_are_scrubbed(dataset, tmp_path,
                                                                              capsys):
    """No eval_golden tag: the eval split is mens's own hash hold-out (said, not silent);
    credentials riding in a teacher URL never reach the uploaded stats.json."""
    from mens.config.compose import compose
    from mens.data.clean import hold_out
    from mens.push.dataset import assemble_dataset
    from mens.synth.dataset import write_jsonl

    copy = tmp_path / "ds"
    shutil.copytree(dataset, copy, ignore=shutil.ignore_patterns("push", "push.json"))
    recs = read_jsonl(copy / "records.jsonl")
    for r in recs:
        r["tags"] = [t for t in r["tags"] if t != "eval_golden"]
    write_jsonl(copy / "records.jsonl", recs)
    stats = json.loads((copy / "stats.json").read_text())
    stats["teacher"]["teachers"]["endpoint"]["base_url"] = "https://u:pw@teach.example/v1?k=abc"
    (copy / "stats.json").write_text(json.dumps(stats))
    cfg = compose(["spoke=structured_shell", f"synth.out={copy}", f"push.repo={REPO}",
                   "data.eval_fraction=0.5"])
    said = []
    m = assemble_dataset(copy, cfg.push, copy / "push", cfg=cfg, log=said.append)
    train, held, _ = hold_out(recs, 0.5)
    assert held and m["configs"]["default"] == {"train": len(train), "eval": len(held)}
    assert any("eval_fraction=0.5" in s for s in said) and "eval_fraction=0.5" in m["eval_from"]
    d = load_local(copy / "push", tmp_path / "cache")
    assert sorted(d["eval"]["id"]) == sorted(r["id"] for r in held)
    pushed = (copy / "push" / "stats.json").read_text()
    assert "https://teach.example/v1" in pushed and "pw@" not in pushed and "k=abc" not in pushed
    assert any("stats.json" in n for n in m["notes"])


def test_no_key_in_any_file_and_a_leaked_key_is_refused(dataset, tmp_path, monkeypatch, capsys):
    leaked = [str(p) for p in dataset.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaked == []
    # a record that quotes the teacher's key (a pasted .env): refused before anything is written
    copy = tmp_path / "ds"
    shutil.copytree(dataset, copy, ignore=shutil.ignore_patterns("push", "push.json"))
    recs = read_jsonl(copy / "records.jsonl")
    recs[0]["messages"][-1]["content"] += f"\nexport {KEY_ENV}={KEY}"
    from mens.synth.dataset import write_jsonl
    write_jsonl(copy / "records.jsonl", recs)
    monkeypatch.setenv(KEY_ENV, KEY)
    capsys.readouterr()
    assert main(["push", "spoke=structured_shell", f"synth.out={copy}", f"push.repo={REPO}",
                 "push.dry_run=true"]) == 2
    err = capsys.readouterr().err
    assert KEY_ENV in err and "records.jsonl" in err and KEY not in err
    assert not (copy / "push").exists() and not (copy / "push.json").exists()


def test_bad_input_exits_2(dataset, tmp_path, capsys, monkeypatch):
    def run(*args):
        capsys.readouterr()
        code = main(["push", "spoke=structured_shell", *args, "push.dry_run=true"])
        return code, capsys.readouterr().err
    code, err = run(f"synth.out={tmp_path / 'nowhere'}", f"push.repo={REPO}")
    assert code == 2 and "synth.out" in err and "does not exist" in err
    (tmp_path / "empty").mkdir()
    code, err = run(f"synth.out={tmp_path / 'empty'}", f"push.repo={REPO}")
    assert code == 2 and "records.jsonl" in err
    code, err = run(f"synth.out={dataset}")
    assert code == 2 and "push.repo" in err and "not set" in err
    code, err = run(f"synth.out={dataset}", "push.repo=just-a-name")
    assert code == 2 and "push.repo" in err and "ORG/NAME" in err
    # a real push needs HF_TOKEN, and no HF_HUB_OFFLINE: refused before anything is built
    monkeypatch.delenv("HF_TOKEN", raising=False)
    copy = tmp_path / "ds"
    shutil.copytree(dataset, copy, ignore=shutil.ignore_patterns("push", "push.json"))
    capsys.readouterr()
    assert main(["push", f"synth.out={copy}", f"push.repo={REPO}"]) == 2
    assert "HF_TOKEN" in capsys.readouterr().err and not (copy / "push").exists()
    monkeypatch.setenv("HF_TOKEN", "hf_unused_" + secrets.token_hex(8))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["push", f"synth.out={copy}", f"push.repo={REPO}"]) == 2
    assert "HF_HUB_OFFLINE" in capsys.readouterr().err and not (copy / "push").exists()
    # and as a user runs it: the real entry point, one paragraph, no traceback
    p = subprocess.run([sys.executable, "-m", "mens.data", "push", f"synth.out={dataset}",
                        "push.repo=a/b/c"], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert p.returncode == 2 and "push.repo" in p.stderr and "Traceback" not in p.stderr


LOAD = """import datasets, json, sys
d = datasets.load_dataset(sys.argv[1])
p = datasets.load_dataset(sys.argv[1], "pairs")
print(json.dumps({**{s: {"id": list(d[s]["id"]), "messages": list(d[s]["messages"])}
                     for s in d}, "pairs": p["train"].num_rows}))"""


def test_push_to_the_stand_in_hub_loads_back_with_load_dataset(dataset, tmp_path):
    """The acceptance: `mens data push` to the stand-in Hub, then `datasets.load_dataset(repo)`
    from it gives the splits; every file arrived byte for byte; a re-push commits nothing."""
    from hub_server import HubServer

    copy = tmp_path / "ds"
    shutil.copytree(dataset, copy, ignore=shutil.ignore_patterns("push", "push.json"))
    token = "hf_standin_" + secrets.token_hex(12)
    with HubServer({}) as hub:
        # child processes: huggingface_hub reads HF_ENDPOINT and HF_HUB_DISABLE_XET at import,
        # and the stand-in speaks no Xet (hf_xet is installed, so it would be used otherwise)
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": token,
               "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(tmp_path / "hf"),
               "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets"), "PYTHONPATH": str(ROOT)}
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
            env.pop(var, None)

        def push():
            return subprocess.run([sys.executable, "-m", "mens.data", "push",
                                   "spoke=structured_shell", f"synth.out={copy}",
                                   f"push.repo={REPO}"], capture_output=True, text=True,
                                  cwd=tmp_path, env=env, timeout=120)
        first = push()
        assert first.returncode == 0, first.stderr
        assert f"{hub.url}/datasets/{REPO}" in first.stdout
        manifest = json.loads((copy / "push.json").read_text())
        arrived = hub.files(REPO, type="dataset")
        paths = {f["path"] for f in manifest["files"]}
        assert set(arrived) - paths <= {".gitattributes"} and paths <= set(arrived)
        for f in manifest["files"]:
            assert hashlib.sha256(arrived[f["path"]]).hexdigest() == f["sha256"]
        up = manifest["upload"]
        assert up["repo_type"] == "dataset" and up["private"] is True and up["created"]
        assert sorted(up["changed"]) == sorted(paths)
        loaded = subprocess.run([sys.executable, "-c", LOAD, REPO], capture_output=True,
                                text=True, cwd=tmp_path, env=env, timeout=120)
        assert loaded.returncode == 0, loaded.stderr
        got = json.loads(loaded.stdout.strip().splitlines()[-1])
        recs = {r["id"]: r for r in read_jsonl(copy / "records.jsonl")}
        golden = {i for i, r in recs.items() if "eval_golden" in r["tags"]}
        assert set(got["eval"]["id"]) == golden and set(got["train"]["id"]) == set(recs) - golden
        for split in ("train", "eval"):
            for rid, msgs in zip(got[split]["id"], got[split]["messages"]):
                assert msgs == recs[rid]["messages"]
        assert got["pairs"] == len(read_jsonl(copy / "pairs.jsonl"))
        commits = len(hub.history(REPO, type="dataset"))
        again = push()
        assert again.returncode == 0, again.stderr
        assert "no file changed" in again.stdout
        assert len(hub.history(REPO, type="dataset")) == commits
    assert json.loads((copy / "push.json").read_text())["upload"]["changed"] == []
    said = first.stdout + first.stderr + again.stdout + again.stderr + loaded.stderr
    assert token not in said
    assert not [p for p in copy.rglob("*") if p.is_file() and token.encode() in p.read_bytes()]
