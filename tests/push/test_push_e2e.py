"""The issue's acceptance for `mens push`, end to end, as a user types it: a real tiny run (evaluated
and gated for real) pushed with `python -m mens.push run=… push.repo=me/tiny-vox push.gguf=true`
to tests/hub_server.py — a real HTTP server on 127.0.0.1 standing in for the Hugging Face Hub,
speaking the protocol huggingface_hub's own client uses (the real Hub cannot be reached here).

One push story, in order: the first push is SIGKILLed while a GGUF is in flight and re-run to
completion; what arrived is byte for byte what `<run>/push/` holds; the card parses with
huggingface_hub and passes the stand-in's metadata check (model-index included); the adapter,
fetched back with hf_hub_download and loaded with PeftModel.from_pretrained, reproduces the run's
held-out loss; a second push uploads no file. Then the refusals: offline and no token exit 2 in
one paragraph, and the token never reaches a file or an output.

Xet: huggingface_hub uploads through Xet whenever hf_xet is importable; the stand-in does not
speak it, so the pushes (subprocesses) get HF_HUB_DISABLE_XET=1, huggingface_hub's own switch.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hub_server import HubServer, validate_metadata
from train_util import run_copy

TOKEN = "hf_e2e_write_token_5f0c3a9e71d2b8"   # the one token the stand-in lets write
REPO, GGUF_REPO = "me/tiny-vox", "me/tiny-vox-GGUF"
TINY_GATE = ["logger=csv", "gate.metric=loss", "gate.max_prompts=2", "gate.k=1",
             "gate.max_new_tokens=8", "gate.collateral=false"]


def _env(hub, home: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HYDRA_FULL_ERROR", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update({"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN, "HF_HOME": str(home),
                "HF_HUB_CACHE": str(home / "hub"), "HF_HUB_DISABLE_XET": "1",
                "HF_HUB_DISABLE_PROGRESS_BARS": "1", "OMP_NUM_THREADS": "1"})
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def push_cmd(run: Path, *more: str) -> list[str]:
    return [sys.executable, "-m", "mens.push", f"run={run}", f"push.repo={REPO}",
            "push.gguf=true", "export.gguf=[f16,q8_0]", *more]


@pytest.fixture(scope="module")
def story(tiny_run, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("push_e2e")
    run = run_copy(tiny_run, tmp / "run")
    g = subprocess.run([sys.executable, "-m", "mens.gate", f"run={run}", *TINY_GATE],
                       capture_output=True, text=True, cwd=tmp, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert (run / "eval.json").is_file() and (run / "gate.json").is_file(), g.stderr[-2000:]
    with HubServer({}, write_tokens=(TOKEN,)) as hub:
        env = _env(hub, tmp / "hf")
        # a dry run first: it makes the export and says which bytes the push will send
        dry = subprocess.run(push_cmd(run, "push.dry_run=true"), capture_output=True, text=True,
                             cwd=tmp, env=env, timeout=600)
        assert dry.returncode == 0, dry.stderr[-3000:]
        manifest = json.loads((run / "push" / "push.json").read_text())
        files = {r["repo_id"]: {f["path"]: f["sha256"] for f in r["files"]}
                 for r in manifest["repos"]}
        q8 = next(s for p, s in files[GGUF_REPO].items() if p.endswith("Q8_0.gguf"))
        # push 1: SIGKILLed while the Q8_0 GGUF's PUT is held (the adapter repo is committed by
        # then: mens pushes it first)
        hold = hub.hold_upload(q8)
        proc = subprocess.Popen(push_cmd(run), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=tmp, env=env)
        try:
            assert hold.reached.wait(300), proc.communicate()[1][-3000:]
        finally:
            proc.kill()
            killed_out, killed_err = proc.communicate()
            hold.release()
        after_kill = {repo: len(hub.history(repo)) for repo in (REPO, GGUF_REPO)
                      if repo in hub.repos}
        # push 1 again: completes
        again = subprocess.run(push_cmd(run), capture_output=True, text=True, cwd=tmp, env=env,
                               timeout=600)
        assert again.returncode == 0, again.stderr[-3000:]
        uploads_after_first = {s: hub.uploads(s) for repo in files.values() for s in repo.values()}
        commits_after_first = {repo: len(hub.history(repo)) for repo in files}
        log_len = len(hub.log)
        # push 2: nothing changed
        second = subprocess.run(push_cmd(run), capture_output=True, text=True, cwd=tmp, env=env,
                                timeout=600)
        yield {"hub": hub, "run": run, "tmp": tmp, "env": env, "files": files, "q8": q8,
               "manifest": manifest, "after_kill": after_kill,
               "outputs": [dry.stdout + dry.stderr, killed_out + killed_err,
                           again.stdout + again.stderr, second.stdout + second.stderr],
               "again": again, "second": second, "uploads": uploads_after_first,
               "commits": commits_after_first, "second_hits": hub.log[log_len:]}


def test_the_adapter_the_card_and_the_gguf_repo_arrive_byte_for_byte(story):
    hub, out = story["hub"], story["run"] / "push"
    folders = {r["repo_id"]: r["folder"] for r in story["manifest"]["repos"]}
    for repo, files in story["files"].items():
        got = hub.files(repo)
        assert {"README.md"} <= set(got) and set(files) <= set(got)
        for path, sha in files.items():
            assert hashlib.sha256(got[path]).hexdigest() == sha
            assert got[path] == (out / folders[repo] / path).read_bytes()
        assert hub.repos[repo].private                    # push.private defaults to true
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(hub.files(REPO))
    gguf = set(hub.files(GGUF_REPO))
    assert "Modelfile" in gguf and any(p.endswith("Q8_0.gguf") for p in gguf)
    # push.json beside the folders records what each repo's commit is
    result = json.loads((out / "push.json").read_text())
    commits = {r["repo_id"]: r["result"]["commit"] for r in result["repos"]}
    assert commits == {repo: hub.repos[repo].sha for repo in (REPO, GGUF_REPO)}


def test_a_push_killed_mid_upload_completes_when_run_again(story):
    # the kill left the adapter repo committed and the GGUF repo without its files
    assert story["after_kill"].get(REPO) == 2                # .gitattributes + the push
    assert story["after_kill"].get(GGUF_REPO, 1) == 1        # created at most: nothing committed
    assert story["commits"][GGUF_REPO] == 2
    # every object was stored exactly once: what reached the Hub before the kill was not resent
    lfs = [s for s, n in story["uploads"].items() if n]
    assert story["q8"] in lfs and all(story["uploads"][s] == 1 for s in lfs)
    assert "0 changed" in story["again"].stdout              # the adapter repo: nothing new


def test_a_second_push_uploads_no_file(story):
    assert story["second"].returncode == 0, story["second"].stderr[-3000:]
    kinds = {h.kind for h in story["second_hits"]}
    # the client still asks the LFS batch API, which answers "already stored": no PUT follows
    assert not kinds & {"upload", "commit", "create"}, kinds
    assert {repo: len(story["hub"].history(repo)) for repo in story["files"]} == story["commits"]
    assert story["second"].stdout.count("0 changed") == 2


def test_the_card_parses_and_its_metadata_validates(story):
    from huggingface_hub import ModelCard, hf_hub_download
    from huggingface_hub.repocard_data import model_index_to_eval_results

    hub = story["hub"]
    text = hub.files(REPO)["README.md"].decode()
    errors, _ = validate_metadata(text, "model")
    assert errors == []
    path = hf_hub_download(REPO, "README.md", endpoint=hub.url, token=TOKEN,
                           cache_dir=str(story["tmp"] / "dl"))
    card = ModelCard.load(path)
    assert card.data.library_name == "peft" and card.data.base_model == "mens/tiny"
    name, results = model_index_to_eval_results(card.data.to_dict()["model-index"])
    ev = json.loads((story["run"] / "eval.json").read_text())
    assert results and name
    tuned = [row["tuned"]["value"] for row in ev["rows"] if row.get("tuned")]
    for r in results:                          # every metric is one of eval.json's tuned values
        assert any(abs(r.metric_value - v) < 1e-9 for v in tuned), r
    gguf_card = ModelCard.load(hf_hub_download(GGUF_REPO, "README.md", endpoint=hub.url,
                                               token=TOKEN, cache_dir=str(story["tmp"] / "dl")))
    assert gguf_card.data.base_model == REPO
    assert validate_metadata(hub.files(GGUF_REPO)["README.md"].decode(), "model")[0] == []


def test_the_pushed_adapter_reproduces_the_runs_eval_loss(story, monkeypatch):
    from huggingface_hub import hf_hub_download
    from peft import PeftModel

    from mens.data.pack_order import EVAL_MICRO
    from mens.model.load import load_base, load_tokenizer
    from mens.plan.spec import compile_run, load_rerun
    from mens.data.prepare import eval_sets
    from mens.train.evaluate import eval_loss

    hub = story["hub"]
    local = story["tmp"] / "pulled"
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        hf_hub_download(REPO, name, endpoint=hub.url, token=TOKEN, local_dir=str(local))
    spec, _ = compile_run(load_rerun(str(story["run"])), "plan")
    model = PeftModel.from_pretrained(load_base(spec.rung), str(local))
    _, exs = eval_sets(spec, load_tokenizer(spec.rung))["eval"]
    loss = eval_loss(model, exs, EVAL_MICRO, max(len(e) for e in exs))["loss"]
    want = json.loads((story["run"] / "summary.json").read_text())["eval_loss_adapter"]
    assert abs(loss - want) <= 1e-5 * want, (loss, want)


@pytest.mark.parametrize("env_change, words", [
    ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE=1"),
    ({"HF_TOKEN": None}, "HF_TOKEN is not set"),
])
def test_offline_or_no_token_exits_2_in_one_paragraph(story, env_change, words):
    hub = story["hub"]
    before = len(hub.log)
    p = subprocess.run(push_cmd(story["run"], "push.repo=me/other"), capture_output=True,
                       text=True, cwd=story["tmp"], timeout=300,
                       env=_env(hub, story["tmp"] / "hf", **env_change))   # None: unset
    assert p.returncode == 2, p.stdout + p.stderr
    errs = [line for line in p.stderr.splitlines() if line.startswith("mens: error")]
    assert len(errs) == 1 and errs[0].startswith("mens: error (exit 2): ") and words in errs[0]
    assert "Traceback" not in p.stderr and len(hub.log) == before   # nothing was sent


def test_the_token_never_reaches_a_file_or_an_output(story):
    outputs = story["outputs"] + [story["second"].stdout + story["second"].stderr]
    assert not [o for o in outputs if TOKEN in o]
    hits = [p for p in story["tmp"].rglob("*") if p.is_file() and TOKEN.encode() in
            p.read_bytes()]
    assert hits == []
    for repo in story["files"]:
        assert not [p for p, data in story["hub"].files(repo).items() if TOKEN.encode() in data]
