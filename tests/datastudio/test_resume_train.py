"""A synthesis run SIGKILLed mid-way and restarted ends with the same records as an uninterrupted
run; and the dataset trains as is: the tiny rung on records.jsonl (SFT) and lane=dpo on the
repair pairs, with the key in no file of the dataset or the run dirs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from datastudio.studio_util import teacher_args

from mens.cli.data import main
from mens.synth.dataset import read_jsonl
from teacher_server import replay_server

ROOT = Path(__file__).resolve().parents[2]
LEAVES = [f"topic {c}" for c in "abcdef"]


def scripts(delay: float) -> list[dict]:
    out = [{"model": "*", "match": "BROKEN", "replies": [{"json": {"response":
            "```bash\necho fixed\n```"}}]}]
    for i, label in enumerate(LEAVES):
        out.append({"model": "*", "match": f"Topic: {label}", "delay_s": delay, "replies": [
            {"json": {"samples": [{"prompt": f"Task {i} one", "response": f"```bash\necho {i}\n```"},
                                  {"prompt": f"Task {i} two",
                                   "response": f"```bash\nif then # BROKEN {i}\n```"}]}}]})
    return out


def write_tree(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    kids = "".join(f"    - {{id: t{i}, label: {label}}}\n" for i, label in enumerate(LEAVES))
    (out / "tree.yaml").write_text(f"spoke: structured_shell\nroot:\n  id: root\n  label: shell\n"
                                   f"  children:\n{kids}")


def content(out: Path, name: str) -> list[str]:
    return sorted(json.dumps({k: v for k, v in r.items() if k != "created_at"}, sort_keys=True)
                  for r in read_jsonl(out / name))


def test_killed_synthesis_resumes_to_the_same_records(key, tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    with replay_server(scripts(0.0), api_key=key) as srv:
        write_tree(whole)
        assert main(["synth", *teacher_args(srv, whole), "spoke=structured_shell",
                     "synth.per_leaf=2"]) == 0
    with replay_server(scripts(0.6), api_key=key) as srv:
        write_tree(killed)
        args = [sys.executable, "-m", "mens.data", "synth", *teacher_args(srv, killed),
                "spoke=structured_shell", "synth.per_leaf=2", "teacher.concurrency=1"]
        proc = subprocess.Popen(args, cwd=ROOT, env=os.environ.copy(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        leaves = killed / ".synth" / "leaves"
        deadline = time.time() + 60
        while time.time() < deadline and len(list(leaves.glob("*.json"))) < 2:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        done = len(list(leaves.glob("*.json")))
        assert 2 <= done < len(LEAVES), "the run was not killed mid-way"
        assert not (killed / "records.jsonl").exists()
        before = len(srv.requests)
        assert main(["synth", *teacher_args(srv, killed), "spoke=structured_shell",
                     "synth.per_leaf=2"]) == 0
        asked = [r for r in srv.requests[before:]
                 if r["body"]["response_format"]["json_schema"]["name"] == "mens_samples"]
        assert len(asked) == len(LEAVES) - done          # finished leaves were not asked again
    for name in ("records.jsonl", "pairs.jsonl", "quarantine.jsonl"):
        assert content(killed, name) == content(whole, name), name
    assert len(read_jsonl(whole / "records.jsonl")) == 12 and \
        len(read_jsonl(whole / "pairs.jsonl")) == 6


# FAST_TRAIN (tests/train_util.py), shortened to 2 optimizer steps
TRAIN = ["+hw=cpu", "logger=csv", "train.seq_len=256", "train.global_batch=2",
         "train.micro_batch=2", "curriculum=flat", "train.eval_max_records=2",
         "train.max_steps=2", "data=file", "data.collateral=none"]


def test_dataset_trains_sft_and_dpo_and_holds_no_key(studio, key, tmp_path, monkeypatch):
    from mens.cli.train import main as train

    out = tmp_path / "ds"
    monkeypatch.chdir(tmp_path)
    with studio("structured_shell") as srv:
        t = [*teacher_args(srv, out), "spoke=structured_shell"]
        assert main(["tree", "expand", *t, "tree.depth=1", "tree.branching=3"]) == 0
        assert main(["synth", *t, "synth.per_leaf=3"]) == 0
        first = read_jsonl(out / "records.jsonl")[0]["id"]
        assert main(["curate", "tag", *t, f"curate.id={first}", "curate.tags=[eval_golden]"]) == 0
    assert train([*TRAIN, f"data.path={out}/records.jsonl", "spoke=structured_shell",
                  f"hydra.run.dir={tmp_path}/sft"]) == 0
    sft = json.loads((tmp_path / "sft" / "summary.json").read_text())
    assert sft["eval_records"] == 1                        # the eval_golden record held out
    pairs = read_jsonl(out / "pairs.jsonl")
    assert len(pairs) == 2
    (tmp_path / "eval_pairs.jsonl").write_text(json.dumps(pairs[0]) + "\n")
    assert train([*TRAIN, "lane=dpo", f"data.path={out}/pairs.jsonl",
                  f"data.eval_path={tmp_path}/eval_pairs.jsonl",
                  f"hydra.run.dir={tmp_path}/dpo"]) == 0
    dpo = json.loads((tmp_path / "dpo" / "summary.json").read_text())
    assert dpo["eval_kind"] == "dpo" and dpo["eval_records"] == 1
    leaked = [str(f) for f in tmp_path.rglob("*") if f.is_file() and key.encode() in f.read_bytes()]
    assert not leaked
