"""Tests for mens.weights against a real, symlinked hub cache layout in tmp_path."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mens.source.weights import (fetch_command, find_weights, hub_cache_dirs,
                          missing_weights_message)

REPO = "Qwen/Qwen3-0.6B"
COMMIT = "a" * 40
OTHER = "b" * 40
SHARD = 1_500_000  # 1.5 MB: far bigger than any symlink


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    # Never let the developer's real cache leak into a test.
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def make_repo(cache: Path, files: dict, commit=COMMIT, ref="main", repo=REPO):
    """files: name -> bytes (blob + symlink), or None (dangling symlink)."""
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    (repo_dir / "blobs").mkdir(parents=True, exist_ok=True)
    snap = repo_dir / "snapshots" / commit
    snap.mkdir(parents=True)
    for name, data in files.items():
        sha = hashlib.sha256(name.encode() + (data or b"")).hexdigest()
        if data is not None:
            (repo_dir / "blobs" / sha).write_bytes(data)
        os.symlink(f"../../blobs/{sha}", snap / name)
    if ref:
        (repo_dir / "refs").mkdir(exist_ok=True)
        (repo_dir / "refs" / ref).write_text(commit)
    return snap


CONFIG = json.dumps({"model_type": "qwen3"}).encode()


def test_size_measured_through_symlinks(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    snap = make_repo(cache, {"config.json": CONFIG, "model.safetensors": b"x" * SHARD})
    assert (snap / "model.safetensors").is_symlink()
    st = find_weights(REPO)
    assert st.present and st.missing == ()
    assert st.resolved_revision == COMMIT and st.path == str(snap)
    assert st.size_bytes == SHARD
    # Pins the bug of measuring the ~50-byte link instead of the blob.
    assert st.size_bytes > 1_000_000


def test_sharded_index_with_missing_shard(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors",
                            "b": "model-00002-of-00002.safetensors"}}
    make_repo(cache, {"config.json": CONFIG,
                      "model.safetensors.index.json": json.dumps(index).encode(),
                      "model-00001-of-00002.safetensors": b"x" * SHARD})
    st = find_weights(REPO)
    assert not st.present
    assert st.missing == ("model-00002-of-00002.safetensors",)
    assert st.size_bytes == SHARD
    assert "model-00002-of-00002.safetensors" in missing_weights_message(st)


def test_dangling_symlink_is_missing(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    make_repo(cache, {"config.json": CONFIG, "model.safetensors": None})
    st = find_weights(REPO)
    assert not st.present and st.missing == ("model.safetensors",)


def test_incomplete_blob_does_not_count(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    snap = make_repo(cache, {"config.json": CONFIG})
    blob = snap.parents[1] / "blobs" / "deadbeef.incomplete"
    blob.write_bytes(b"x" * 10)
    os.symlink("../../blobs/deadbeef.incomplete", snap / "model.safetensors")
    st = find_weights(REPO)
    assert not st.present and st.missing == ("model.safetensors",)


def test_pinned_revision_absent_while_other_snapshot_exists(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    make_repo(cache, {"config.json": CONFIG, "model.safetensors": b"x" * 10}, commit=OTHER)
    st = find_weights(REPO, revision=COMMIT)
    assert not st.present and st.path is None
    assert st.missing == (f"snapshot for revision {COMMIT}",)
    msg = missing_weights_message(st)
    assert f"{REPO}@{COMMIT}" in msg
    assert f"hf download {REPO} --revision {COMMIT}" in msg


def test_revision_as_branch_name_resolves_through_refs(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    make_repo(cache, {"config.json": CONFIG, "model.safetensors": b"x" * 10},
              commit=OTHER, ref="dev")
    st = find_weights(REPO, revision="dev")
    assert st.present and st.resolved_revision == OTHER
    # Unpinned means refs/main, which does not exist here.
    unpinned = find_weights(REPO)
    assert not unpinned.present and unpinned.missing == ("snapshot for refs/main",)
    assert "@unpinned (refs/main)" in missing_weights_message(unpinned)


def test_cache_dir_precedence(tmp_path, monkeypatch):
    hub, home = tmp_path / "hub", tmp_path / "hfhome"
    monkeypatch.setenv("HF_HOME", str(home))
    assert hub_cache_dirs()[0] == home / "hub"
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(tmp_path / "legacy"))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    assert hub_cache_dirs() == [hub, tmp_path / "legacy", home / "hub",
                                tmp_path / "xdg" / "huggingface" / "hub"]
    # Weights in both: HF_HUB_CACHE wins; in HF_HOME only: still found.
    in_home = make_repo(home / "hub", {"config.json": CONFIG, "model.safetensors": b"h"})
    assert find_weights(REPO).path == str(in_home)
    in_hub = make_repo(hub, {"config.json": CONFIG, "model.safetensors": b"hub"})
    st = find_weights(REPO)
    assert st.path == str(in_hub) and st.looked_in == (str(hub / "models--Qwen--Qwen3-0.6B"),)


def test_explicit_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_bytes(CONFIG)
    (d / "model.safetensors").write_bytes(b"x" * 1234)
    st = find_weights(REPO, path=str(d))
    assert st.present and st.size_bytes == 1234
    assert st.looked_in == (str(d),) and st.path == str(d)
    (d / "config.json").unlink()
    st = find_weights(REPO, path=str(d))
    assert not st.present and st.missing == ("config.json",)
    gone = find_weights(REPO, path=str(tmp_path / "nope"))
    assert not gone.present and gone.looked_in == (str(tmp_path / "nope"),)


def test_message_names_everything(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c1"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "h"))
    st = find_weights(REPO)
    assert not st.present and st.missing == ("repo folder models--Qwen--Qwen3-0.6B",)
    assert len(st.looked_in) == 3
    msg = missing_weights_message(st)
    assert "\n" not in msg
    assert REPO in msg and "@unpinned (refs/main)" in msg
    for d in st.looked_in:
        assert d in msg
    for needle in (fetch_command(REPO, None), "HF_HUB_CACHE", "rung.path=/dir",
                   "rung.init=random", "repo folder"):
        assert needle in msg


def test_fetch_command():
    assert fetch_command(REPO, None) == "hf download Qwen/Qwen3-0.6B"
    assert fetch_command(REPO, "abc") == "hf download Qwen/Qwen3-0.6B --revision abc"


def test_import_is_light():
    code = ("import sys, mens.source.weights; "
            "print([m for m in ('torch', 'transformers', 'huggingface_hub') if m in sys.modules])")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[]"
