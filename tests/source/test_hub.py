"""mens.source.hub against tests/hub_server.py — a real HTTP server on 127.0.0.1 standing in for
the Hugging Face Hub — with the real huggingface_hub client, peft and transformers.

The served repo is the embedded tiny model (mens/assets/tiny) plus decoys a real repo carries and
mens must never fetch (pytorch_model.bin, model.gguf, onnx/, original/consolidated.pth,
consolidated.safetensors). Each test gets its own HF_HOME / HF_HUB_CACHE under tmp_path.

How the client is pointed at the server: mens.source.hub reads HF_ENDPOINT, HF_HUB_CACHE,
HF_HUB_OFFLINE and HF_TOKEN from the environment at call time and passes endpoint/cache/token to
huggingface_hub explicitly, so monkeypatch.setenv is enough for mens. huggingface_hub itself reads
its constants once, at import (ENDPOINT, HF_HUB_CACHE, HF_HUB_OFFLINE, HF_TOKEN_PATH), and
transformers/peft use them when loading by hub id, so the fixture also patches
`huggingface_hub.constants` (ENDPOINT, HUGGINGFACE_CO_URL_TEMPLATE, HF_HUB_CACHE, HF_HUB_OFFLINE,
HF_TOKEN_PATH, AGENT_HARNESSES_PATH) for the length of each test.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hub_server import HubServer, Repo, files_in, offline

from mens.errors import EXIT_CONFIG, ConfigError
from mens.source.hub import download_weights, fetch_meta, portable_adapter
from mens.source.weights import find_weights, missing_weights_message

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "mens" / "assets" / "tiny"
REPO, GATED = "mens-test/tiny", "mens-test/gated"
TOKEN = "hf_standin_0123456789abcdef"                   # granted access to GATED by the server
WANTED = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
          "tokenizer_config.json"}
META_FILES = {"config.json", "tokenizer.json", "tokenizer_config.json"}
DECOYS = {"pytorch_model.bin": b"\x80\x02pickle" * 4000, "model.gguf": b"GGUF" + b"\0" * 4000,
          "onnx/model.onnx": b"onnx" * 1000, "original/consolidated.pth": b"pth" * 3000,
          "consolidated.safetensors": b"\x08\0\0\0\0\0\0\0{}      ", "README.md": b"# tiny\n"}


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def hub(tmp_path, monkeypatch):
    import huggingface_hub.constants as C

    files = {name: (TINY / name).read_bytes() for name in WANTED} | DECOYS
    repos = {REPO: Repo(files), GATED: Repo(dict(files), gated=True, tokens=(TOKEN,))}
    home = tmp_path / "hf"
    with HubServer(repos) as server:
        for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                    "HUGGINGFACE_HUB_CACHE"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HOME", str(home))
        monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))   # never the user's cache
        monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        for name, value in {"ENDPOINT": server.url, "HF_HUB_CACHE": str(home / "hub"),
                            "HUGGINGFACE_CO_URL_TEMPLATE":
                                server.url + "/{repo_id}/resolve/{revision}/{filename}",
                            "HF_HUB_OFFLINE": False, "HF_TOKEN_PATH": str(home / "token"),
                            "AGENT_HARNESSES_PATH": str(home / ".agent_harnesses.json")}.items():
            monkeypatch.setattr(C, name, value)
        yield server


def test_download_takes_only_the_needed_files_and_resolves_the_commit(hub):
    path, commit = download_weights(REPO, None)
    assert commit == hub.repos[REPO].sha and path.name == commit
    assert files_in(path) == WANTED
    assert hub.transferred() == WANTED
    asked = {h.path for h in hub.log}
    assert not asked & set(DECOYS), f"decoys were requested: {asked & set(DECOYS)}"
    for name in WANTED:
        assert sha256(path / name) == sha256(TINY / name), name
    # refs/main now names that commit: a pinned re-run and an unpinned one find the same snapshot
    assert find_weights(REPO, commit).path == str(path) == find_weights(REPO, None).path


def test_files_present_means_no_request_at_all(hub, monkeypatch):
    path, commit = download_weights(REPO, None)
    hub.log.clear()
    assert download_weights(REPO, None) == (path, commit)
    assert download_weights(REPO, commit) == (path, commit)
    assert fetch_meta(REPO, None) == (path, commit)
    assert hub.log == []
    offline(monkeypatch)                      # and offline it is the same answer
    assert download_weights(REPO, None) == (path, commit)
    assert hub.log == []


def test_fetch_meta_takes_config_and_tokenizer_only(hub):
    path, commit = fetch_meta(REPO, None)
    assert commit == hub.repos[REPO].sha
    assert files_in(path) == META_FILES == hub.transferred()
    assert json.loads((path / "config.json").read_text())["hidden_size"] == 256
    assert hub.count("model.safetensors", "HEAD") == hub.count("model.safetensors") == 0
    # the tokenizer that planning measures lengths with is the real one
    from tokenizers import Tokenizer
    assert Tokenizer.from_file(str(path / "tokenizer.json")).get_vocab_size() == 4096
    # later, the weights download reuses what is there: config.json is not sent twice
    assert download_weights(REPO, None) == (path, commit)
    assert hub.count("config.json") == 1 and hub.count("model.safetensors") == 1


def test_a_dropped_connection_resumes_with_a_range_request(hub, monkeypatch):
    import huggingface_hub.constants as C
    # huggingface_hub keeps what it received only in whole chunks of DOWNLOAD_CHUNK_SIZE (10 MiB);
    # the tiny model is 8 MiB, so shrink the chunk to see a resume inside one file.
    monkeypatch.setattr(C, "DOWNLOAD_CHUNK_SIZE", 1 << 20)
    cut = 3 * (1 << 20) + 123
    hub.cut("model.safetensors", cut)
    path, _ = download_weights(REPO, None)
    gets = [h for h in hub.log if h.path == "model.safetensors" and h.method == "GET"]
    assert [(h.status, h.range) for h in gets] == [(200, None), (206, f"bytes={3 << 20}-")]
    assert sha256(path / "model.safetensors") == sha256(TINY / "model.safetensors")


def test_an_interrupted_run_keeps_its_files_and_the_rerun_fetches_the_rest(hub):
    hub.fail("model.safetensors", 500)
    with pytest.raises(ConfigError) as e:
        download_weights(REPO, None)
    assert "HTTP 500" in e.value.message and "re-run" in e.value.message
    hub.log.clear()
    path, commit = download_weights(REPO, None)
    assert hub.transferred() == {"model.safetensors"}
    assert files_in(path) == WANTED and commit == hub.repos[REPO].sha


def test_gated_repo_needs_hf_token(hub, monkeypatch):
    with pytest.raises(ConfigError) as e:
        download_weights(GATED, None)
    msg = e.value.message
    assert e.value.code == EXIT_CONFIG and e.value.key == "rung"
    assert "gated" in msg and "HF_TOKEN" in msg and f"{hub.url}/{GATED}" in msg
    assert "model.safetensors" not in hub.transferred()

    monkeypatch.setenv("HF_TOKEN", "hf_someone_elses_token")
    with pytest.raises(ConfigError) as e:
        fetch_meta(GATED, None)
    assert "no access" in e.value.message and "hf_someone_elses_token" not in e.value.message

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.log.clear()
    path, commit = download_weights(GATED, None)
    assert commit == hub.repos[GATED].sha and files_in(path) == WANTED
    resolves = [h for h in hub.log if h.kind == "resolve"]
    assert resolves and all(h.authorized for h in resolves)
    # like the Hub's CDN: the token is not sent off the Hub's origin
    assert not any(h.authorized for h in hub.log if h.kind == "cdn")
    assert TOKEN not in "".join(p.read_text(errors="ignore") for p in
                                (Path(os.environ["HF_HOME"])).rglob("*") if p.is_file()
                                and p.stat().st_size < 1 << 20)


def test_offline_names_the_hf_download_command_that_works(hub, monkeypatch, tmp_path):
    offline(monkeypatch)
    with pytest.raises(ConfigError) as e:
        download_weights(REPO, None)
    msg = e.value.message
    assert "HF_HUB_OFFLINE=1" in msg and hub.log == []
    cmd = msg.split("`")[1]
    assert cmd.startswith(f"hf download {REPO} --include ")
    with pytest.raises(ConfigError) as e:
        fetch_meta(REPO, "v1")
    assert "`hf download mens-test/tiny --revision v1 --include config.json" in e.value.message

    # the command as printed, run by the real `hf` CLI on "a machine with network access"
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    hf = Path(sys.executable).parent / "hf"
    done = subprocess.run([str(hf), *shlex.split(cmd)[1:]], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    hub.log.clear()
    path, commit = download_weights(REPO, None)        # still offline: found in the cache
    assert files_in(path) == WANTED and commit == hub.repos[REPO].sha and hub.log == []


def test_no_network_names_the_command(hub, monkeypatch):
    with socket.socket() as s:                          # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    for fetch in (download_weights, fetch_meta):
        with pytest.raises(ConfigError) as e:
            fetch(REPO, None)
        assert "could not reach" in e.value.message
        assert f"`hf download {REPO} --include" in e.value.message


def test_unknown_repo_and_revision(hub):
    with pytest.raises(ConfigError, match="was not found on .*check rung.repo_id"):
        fetch_meta("mens-test/nope", None)
    with pytest.raises(ConfigError, match="revision 'v9' does not exist in mens-test/tiny"):
        download_weights(REPO, "v9")
    assert hub.transferred() == set()


def test_download_false_keeps_the_never_download_behaviour(hub):
    with pytest.raises(ConfigError) as e:
        download_weights(REPO, None, allow_download=False)
    assert e.value.message == ConfigError(missing_weights_message(find_weights(REPO))).message
    with pytest.raises(ConfigError, match="rung.download=false"):
        fetch_meta(REPO, None, allow_download=False)
    assert hub.log == []


def test_portable_adapter_loads_by_hub_id_from_the_cache(hub, monkeypatch, tmp_path):
    import torch
    from peft import AutoPeftModelForCausalLM, LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    _, commit = download_weights(REPO, None)          # the cache a user's machine would hold
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(str(TINY))
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                      init_lora_weights=False, task_type="CAUSAL_LM")   # B≠0: the adapter acts
    adapter = tmp_path / "adapter"
    get_peft_model(base, lora).save_pretrained(str(adapter))
    assert json.loads((adapter / "adapter_config.json").read_text())[
        "base_model_name_or_path"] == str(TINY)              # what PEFT writes: a local path

    portable_adapter(adapter, REPO, commit)
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    assert (cfg["base_model_name_or_path"], cfg["revision"]) == (REPO, commit)

    ids = torch.tensor([[4094, 17, 250, 1033, 9, 4095]])
    by_path = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(TINY)),
                                        str(adapter)).eval()
    offline(monkeypatch)
    # `main` has moved on to a commit this cache does not hold: the adapter's pinned revision,
    # not refs/main, must pick the snapshot
    (Path(os.environ["HF_HUB_CACHE"]) / "models--mens-test--tiny" / "refs" / "main").write_text(
        "0" * 40)
    hub.log.clear()
    by_id = AutoPeftModelForCausalLM.from_pretrained(str(adapter)).eval()
    assert hub.log == []                                   # the cache alone, no request
    assert by_id.base_model.model.config._name_or_path == REPO
    with torch.no_grad():
        want, got = by_path(ids).logits, by_id(ids).logits
    assert torch.equal(want, got)
    with torch.no_grad(), by_path.disable_adapter():
        assert not torch.allclose(by_path(ids).logits, want)   # the adapter changes the logits


def test_a_run_downloads_after_the_plan_and_records_the_commit(hub, tmp_path):
    """`+rung=hf rung.repo_id=…` end to end: config.json and the tokenizer come before the plan,
    the weights after it fits; the commit lands in spec.yaml and the first telemetry row; the
    adapter names the base by hub id and commit; a second run fetches nothing."""
    import yaml
    from train_util import FAST_TRAIN

    from mens.config.compose import compose
    from mens.plan.output import plan_run
    from mens.train.run import train_run

    overrides = [*FAST_TRAIN, "+rung=hf", f"rung.repo_id={REPO}", "train.max_steps=2",
                 "train.eval_max_records=2", "train.seq_len=128"]
    run = tmp_path / "run"
    spec, plan = plan_run(compose(overrides), run, "train")
    sha = hub.repos[REPO].sha
    assert spec.rung.commit == sha and spec.rung.family == "qwen3"
    assert hub.transferred() == WANTED           # meta before the plan, weights after it
    assert yaml.safe_load((run / "spec.yaml").read_text())["rung"]["commit"] == sha
    train_run(spec, plan, run)
    first = json.loads((run / "telemetry.jsonl").read_text().splitlines()[0])
    assert first["spec"]["rung"]["commit"] == sha
    adapter = json.loads((run / "adapter" / "adapter_config.json").read_text())
    assert (adapter["base_model_name_or_path"], adapter["revision"]) == (REPO, sha)
    hub.log.clear()
    spec2, _ = plan_run(compose(overrides), tmp_path / "again", "train")
    assert spec2.rung.commit == sha and hub.log == []   # weights present: nothing is fetched
