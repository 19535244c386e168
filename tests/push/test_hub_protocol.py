"""mens.push.hub.upload against tests/hub_server.py — a real HTTP server on 127.0.0.1 standing in
for the Hugging Face Hub — with the real huggingface_hub client (and datasets, in a subprocess,
for loading a pushed dataset back).

Xet: huggingface_hub uploads through Xet whenever hf_xet is importable, and the stand-in does not
speak Xet. The client reads `huggingface_hub.constants.HF_HUB_DISABLE_XET` at call time (set from
the environment once, at import, which may have happened before this file is collected), so the
fixture sets both the environment variable (for subprocesses) and the constant, and checks that
the client really is on the legacy LFS path.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hub_server import HubServer, Repo

from mens.errors import EXIT_CONFIG, EXIT_FAILED, ConfigError, RunFailed
from mens.push.hub import upload

TOKEN = "hf_standin_write_0123456789abcdef"     # the one token the stand-in lets write
REPO, DS = "mens-test/tiny-lora", "mens-test/tiny-data"
WRITES = {"create", "branch", "preupload", "lfs-batch", "upload", "verify", "commit"}


@pytest.fixture
def hub(tmp_path, monkeypatch):
    import huggingface_hub.constants as C
    from huggingface_hub.utils._runtime import is_xet_available

    home = tmp_path / "hf"
    with HubServer({}, write_tokens=(TOKEN,)) as server:
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HUGGINGFACE_HUB_CACHE"):
            monkeypatch.delenv(var, raising=False)
        for var, value in {"HF_ENDPOINT": server.url, "HF_TOKEN": TOKEN, "HF_HOME": str(home),
                           "HF_HUB_CACHE": str(home / "hub"), "HF_HUB_DISABLE_XET": "1",
                           "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                           "XDG_CACHE_HOME": str(tmp_path / "xdg")}.items():
            monkeypatch.setenv(var, value)
        for name, value in {"ENDPOINT": server.url, "HF_HUB_CACHE": str(home / "hub"),
                            "HUGGINGFACE_CO_URL_TEMPLATE":
                                server.url + "/{repo_id}/resolve/{revision}/{filename}",
                            "HF_HUB_DISABLE_XET": True, "HF_HUB_OFFLINE": False,
                            "HF_TOKEN_PATH": str(home / "token"),
                            "AGENT_HARNESSES_PATH": str(home / ".agent_harnesses.json")}.items():
            monkeypatch.setattr(C, name, value)
        assert not is_xet_available()      # else the client would try Xet against the stand-in
        yield server


def card(model_index: str = "") -> str:
    """A model card as mens writes one: licence, base model, and a model-index built by
    huggingface_hub's own ModelCardData/EvalResult unless `model_index` (raw YAML) replaces it."""
    from huggingface_hub import EvalResult, ModelCardData
    result = EvalResult(task_type="text-generation", dataset_type="golden", dataset_name="golden",
                        metric_type="pass_rate", metric_value=0.5)
    data = ModelCardData(license="apache-2.0", base_model="mens-test/tiny", model_name="tiny-lora",
                         eval_results=[result])
    yaml = data.to_yaml()
    if model_index:
        yaml = yaml.split("model-index:")[0] + model_index
    return f"---\n{yaml.strip()}\n---\n# tiny-lora\n"


def model_folder(d: Path, seed: bytes = b"w") -> dict[str, bytes]:
    files = {"adapter_config.json": b'{"r": 8}\n',
             "adapter_model.safetensors": hashlib.sha256(seed).digest() * 6000,   # 192 kB
             "tiny-lora.Q8_0.gguf": b"GGUF" + hashlib.sha256(seed + b"g").digest() * 3000,
             "README.md": card().encode()}
    for name, data in files.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)
    return files


def kinds(hub) -> list[str]:
    return [h.kind for h in hub.log]


def test_upload_then_reupload_changes_nothing(hub, tmp_path):
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import RepositoryNotFoundError

    files = model_folder(tmp_path / "out")
    r = upload(tmp_path / "out", REPO, message="mens push: tiny-lora")
    assert r["created"] and r["private"] and r["branch"] == "main"
    assert r["files"] == sorted(files) and r["changed"] == sorted(files)
    got = hub.files(REPO)
    assert {k: got[k] for k in files} == files and ".gitattributes" in got   # byte for byte
    assert r["commit"] == hub.repos[REPO].sha == hub.history(REPO)[0].sha
    assert hub.history(REPO)[0].title == "mens push: tiny-lora"
    for name in ("adapter_model.safetensors", "tiny-lora.Q8_0.gguf"):   # LFS: PUT to storage
        assert hub.uploads(files[name]) == 1
    assert all(h.authorized for h in hub.log if h.kind in WRITES - {"upload"})
    # back through the download protocol (302 to the CDN), as a user would fetch it
    path = hf_hub_download(REPO, "adapter_model.safetensors", endpoint=hub.url, token=TOKEN,
                           cache_dir=tmp_path / "dl")
    assert Path(path).read_bytes() == files["adapter_model.safetensors"]
    with pytest.raises(RepositoryNotFoundError):          # private: invisible without a token
        HfApi(endpoint=hub.url).repo_info(REPO, token=False)

    hub.log.clear()                                        # the same folder again
    again = upload(tmp_path / "out", REPO, message="mens push: tiny-lora")
    assert again["changed"] == [] and again["commit"] == r["commit"] and not again["created"]
    assert not {"upload", "commit", "create"} & set(kinds(hub)), kinds(hub)
    assert len(hub.history(REPO)) == 2                     # .gitattributes' commit + the push

    (tmp_path / "out" / "adapter_config.json").write_bytes(b'{"r": 16}\n')
    hub.log.clear()
    third = upload(tmp_path / "out", REPO, message="r=16")
    assert third["changed"] == ["adapter_config.json"] and third["commit"] != r["commit"]
    assert "upload" not in kinds(hub) and kinds(hub).count("commit") == 1
    assert hub.files(REPO)["adapter_config.json"] == b'{"r": 16}\n'


def test_existing_public_repo_is_said_loudly(hub, tmp_path):
    hub.repos["mens-test/public"] = Repo({"README.md": b"# public\n"})
    model_folder(tmp_path / "out")
    said = []
    r = upload(tmp_path / "out", "mens-test/public", message="x", log=said.append)
    assert not r["created"] and r["private"] is False and "create" not in kinds(hub)
    assert len(said) == 1 and "PUBLIC" in said[0] and "push.private" in said[0]
    assert hub.files("mens-test/public")["README.md"] == card().encode()


def test_branch_leaves_main_alone(hub, tmp_path):
    files = model_folder(tmp_path / "a")
    main = upload(tmp_path / "a", REPO, message="main")
    model_folder(tmp_path / "b", seed=b"other")
    dev = upload(tmp_path / "b", REPO, branch="dev", revision=main["commit"], message="dev")
    assert dev["branch"] == "dev" and not dev["created"] and dev["commit"] != main["commit"]
    assert dev["changed"] == ["adapter_model.safetensors", "tiny-lora.Q8_0.gguf"]
    assert {k: hub.files(REPO)[k] for k in files} == files                  # main unchanged
    assert hub.repos[REPO].sha == main["commit"]
    assert hub.files(REPO, "dev")["adapter_model.safetensors"] == \
        (tmp_path / "b" / "adapter_model.safetensors").read_bytes()
    assert [c.sha for c in hub.history(REPO, "dev")][1] == main["commit"]   # started from it
    with pytest.raises(ConfigError) as e:
        upload(tmp_path / "b", REPO, branch="dev2", revision="no-such-rev", message="x")
    assert e.value.key == "push.revision" and "no-such-rev" in e.value.message
    assert "dev2" not in hub.repos[REPO].branches


def test_invalid_model_index_refused_before_anything(hub, tmp_path):
    model_folder(tmp_path / "out")
    bad = ("model-index:\n- name: tiny-lora\n  results:\n  - task: {type: text-generation}\n"
           "    metrics: [{type: pass_rate, value: 0.5}]\n")            # no `dataset`
    (tmp_path / "out" / "README.md").write_text(card(bad))
    with pytest.raises(ConfigError) as e:
        upload(tmp_path / "out", REPO, message="x")
    msg = e.value.message
    assert e.value.code == EXIT_CONFIG and "README.md" in msg and "model-index" in msg
    assert "\n" not in msg and TOKEN not in msg
    assert kinds(hub) == ["validate"] and REPO not in hub.repos    # no repo, no byte


def test_interrupted_upload_resumes_without_resending(hub, tmp_path):
    files = model_folder(tmp_path / "out")
    first, second = files["adapter_model.safetensors"], files["tiny-lora.Q8_0.gguf"]
    hub.fail_upload(second, 403)          # storage refuses the 2nd object once (no client retry)
    with pytest.raises(RunFailed) as e:
        upload(tmp_path / "out", REPO, message="x")
    msg = e.value.message
    assert e.value.code == EXIT_FAILED and "tiny-lora.Q8_0.gguf" in msg and "re-run" in msg
    assert "\n" not in msg and TOKEN not in msg
    assert len(hub.history(REPO)) == 1 and hub.uploads(first) == 1 and hub.uploads(second) == 0
    r = upload(tmp_path / "out", REPO, message="x")
    assert {k: hub.files(REPO)[k] for k in files} == files and r["changed"] == sorted(files)
    assert hub.uploads(first) == 1 and hub.uploads(second) == 1       # each sent once in all


def test_killed_mid_upload_then_rerun(hub, tmp_path):
    """The uploading process is SIGKILLed while the 2nd object's PUT is in flight."""
    files = model_folder(tmp_path / "out")
    first, second = files["adapter_model.safetensors"], files["tiny-lora.Q8_0.gguf"]
    hold = hub.hold_upload(second)
    code = f"from mens.push.hub import upload; upload({str(tmp_path / 'out')!r}, {REPO!r}, " \
           f"message='x')"
    proc = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert hold.reached.wait(30), proc.stderr.read() if proc.poll() is not None else ""
        deadline = time.monotonic() + 20
        while hub.uploads(first) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
        hold.release()
    assert len(hub.history(REPO)) == 1 and hub.uploads(first) == 1
    r = upload(tmp_path / "out", REPO, message="x")
    assert {k: hub.files(REPO)[k] for k in files} == files and r["commit"] == hub.repos[REPO].sha
    assert hub.uploads(first) == 1 and hub.uploads(second) == 1


def test_token_offline_and_network_refusals(hub, tmp_path, monkeypatch):
    model_folder(tmp_path / "out")
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(ConfigError) as e:
        upload(tmp_path / "out", REPO, message="x")
    assert e.value.code == EXIT_CONFIG and e.value.key == "push.repo"
    assert "HF_TOKEN" in e.value.message and "settings/tokens" in e.value.message
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as e:
        upload(tmp_path / "out", REPO, message="x")
    assert "HF_HUB_OFFLINE=1" in e.value.message and TOKEN not in e.value.message
    assert hub.log == []                                   # neither reached the server
    monkeypatch.delenv("HF_HUB_OFFLINE")

    read_only = "hf_standin_readonly_fedcba9876543210"     # a token the stand-in won't let write
    monkeypatch.setenv("HF_TOKEN", read_only)
    with pytest.raises(ConfigError) as e:
        upload(tmp_path / "out", REPO, message="x")
    assert "no write access to mens-test" in e.value.message and "HTTP 403" in e.value.message
    assert read_only not in e.value.message and "\n" not in e.value.message
    assert REPO not in hub.repos

    with socket.socket() as s:                             # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", dead)
    with pytest.raises(ConfigError) as e:
        upload(tmp_path / "out", REPO, message="x")
    assert "could not reach " + dead in e.value.message and read_only not in e.value.message


LOAD = """
import json, datasets
ds = datasets.load_dataset({repo!r})
print(json.dumps({{split: ds[split].to_list() for split in ds}}))
"""


def test_dataset_push_loads_with_datasets(hub, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = {"train": [{"prompt": f"p{i}", "completion": f"c{i}"} for i in range(5)],
            "eval": [{"prompt": "q", "completion": "a"}]}
    out = tmp_path / "ds"
    (out / "data").mkdir(parents=True)
    for split, split_rows in rows.items():
        pq.write_table(pa.Table.from_pylist(split_rows),
                       out / "data" / f"{split}-00000-of-00001.parquet")
    (out / "README.md").write_text("---\nlicense: mit\ntask_categories: [text-generation]\n---\n"
                                   "# tiny-data\n")
    r = upload(out, DS, repo_type="dataset", message="mens data push")
    assert r["url"] == f"{hub.url}/datasets/{DS}" and DS in hub.datasets and REPO not in hub.repos
    assert hub.uploads((out / "data" / "train-00000-of-00001.parquet").read_bytes()) == 1
    hub.log.clear()
    env = {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "dsc")}
    p = subprocess.run([sys.executable, "-c", LOAD.format(repo=DS)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == rows
    # what datasets 5.2 asked: card, info, tree, then the parquet files through the CDN
    assert {"resolve", "info", "tree", "cdn"} <= set(kinds(hub))
    assert all(h.status < 500 for h in hub.log)
