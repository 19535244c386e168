"""Find a model's weights locally (Hugging Face hub cache or an explicit path).

Planning a run must be instant and must work offline, so this module never
imports torch, transformers or huggingface_hub and never downloads anything.
It walks the hub cache layout itself:

    <cache>/models--{org}--{name}/refs/<branch>         file holding a commit hash
    <cache>/models--{org}--{name}/snapshots/<commit>/*  symlinks to ../../blobs/<sha>
    <cache>/models--{org}--{name}/blobs/<sha>           the actual bytes
"""
from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

INDEX_FILE = "model.safetensors.index.json"


@dataclass(frozen=True)
class WeightsStatus:
    repo_id: str
    revision: str | None            # requested revision (None = unpinned -> refs/main)
    resolved_revision: str | None   # snapshot commit actually found
    path: str | None                # snapshot dir or explicit path, when found
    present: bool                   # config.json + every safetensors shard exist and are non-empty
    size_bytes: int                 # weight bytes measured through symlinks
    looked_in: tuple[str, ...]      # every directory checked, in order
    missing: tuple[str, ...]        # what is missing when not present


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(os.path.expanduser(os.path.expandvars(value))) if value else None


def hub_cache_dirs() -> list[Path]:
    """Candidate hub cache directories, highest precedence first.

    Mirrors huggingface_hub.constants: HF_HUB_CACHE, then the legacy
    HUGGINGFACE_HUB_CACHE, then $HF_HOME/hub, then
    ${XDG_CACHE_HOME:-~/.cache}/huggingface/hub. huggingface_hub itself only
    uses the first one that is set; we return every distinct candidate so that
    weights sitting in the default cache are still found (and reported) when a
    stray HF_HUB_CACHE points elsewhere. Since we hand the snapshot *path* to
    training, it does not matter which cache the weights were found in.
    """
    candidates = [_env_path("HF_HUB_CACHE"), _env_path("HUGGINGFACE_HUB_CACHE")]
    hf_home = _env_path("HF_HOME")
    if hf_home is not None:
        candidates.append(hf_home / "hub")
    xdg = _env_path("XDG_CACHE_HOME") or Path.home() / ".cache"
    candidates.append(xdg / "huggingface" / "hub")
    out: list[Path] = []
    for c in candidates:
        if c is not None and c not in out:
            out.append(c)
    return out


def _file_size(p: Path) -> int | None:
    """Size of the file behind p, following symlinks; None if absent/dangling/partial.

    os.stat (not lstat) on purpose: a snapshot entry is a ~50-byte symlink and
    measuring the link instead of the blob is a known way to get nonsense sizes.
    """
    try:
        if os.path.realpath(p).endswith(".incomplete"):
            return None  # a download that never finished is not weights
        st = os.stat(p)
    except OSError:
        return None
    return st.st_size if st.st_size > 0 else None


def _check_dir(d: Path) -> tuple[int, list[str]]:
    """Return (weight bytes, missing names) for a directory holding a model."""
    missing: list[str] = []
    if _file_size(d / "config.json") is None:
        missing.append("config.json")
    index = d / INDEX_FILE
    if index.exists() or index.is_symlink():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError):
            return 0, missing + [f"{INDEX_FILE} (unreadable)"]
    else:
        # Unsharded: any *.safetensors (glob also yields dangling symlinks,
        # which _file_size then reports as missing by name).
        shards = sorted(p.name for p in d.glob("*.safetensors"))
        if not shards:
            return 0, missing + ["*.safetensors"]
    size = 0
    for name in shards:
        n = _file_size(d / name)
        if n is None:
            missing.append(name)
        else:
            size += n
    return size, missing


def _resolve_commit(repo_dir: Path, revision: str | None) -> tuple[str | None, str]:
    """Map a requested revision to a snapshot commit; also return a label for errors."""
    ref = "main" if revision is None else revision
    ref_file = repo_dir / "refs" / ref  # branch names may contain '/', e.g. pr/1
    if ref_file.is_file():
        commit = ref_file.read_text().strip()
        return commit, f"revision {ref} (commit {commit})"
    if revision is None:
        return None, "refs/main"
    return revision, f"revision {revision}"  # assume a commit hash


def find_weights(repo_id: str, revision: str | None = None,
                 path: str | None = None) -> WeightsStatus:
    """Locate weights without touching the network; see WeightsStatus."""
    if path is not None:
        # An explicit path wins outright: no cache walk, so nothing surprising
        # gets picked up from a cache the user did not mean.
        d = Path(path).expanduser()
        if not d.is_dir():
            return WeightsStatus(repo_id, revision, None, None, False, 0,
                                 (str(d),), (f"directory {d}",))
        size, missing = _check_dir(d)
        return WeightsStatus(repo_id, revision, None, str(d), not missing, size,
                             (str(d),), tuple(missing))

    folder = "models--" + repo_id.replace("/", "--")
    looked_in: list[str] = []
    best: WeightsStatus | None = None  # most informative failure so far
    for cache in hub_cache_dirs():
        repo_dir = cache / folder
        looked_in.append(str(repo_dir))
        if not repo_dir.is_dir():
            continue
        commit, label = _resolve_commit(repo_dir, revision)
        snap = repo_dir / "snapshots" / commit if commit else None
        if snap is None or not snap.is_dir():
            miss = (f"snapshot for {label}",)
            if best is None:
                best = WeightsStatus(repo_id, revision, None, None, False, 0, (), miss)
            continue
        size, missing = _check_dir(snap)
        status = WeightsStatus(repo_id, revision, commit, str(snap), not missing,
                               size, (), tuple(missing))
        if status.present:
            return _with_looked_in(status, looked_in)
        if best is None or best.path is None:  # a partial snapshot beats none
            best = status
    if best is None:
        best = WeightsStatus(repo_id, revision, None, None, False, 0, (),
                             (f"repo folder {folder}",))
    return _with_looked_in(best, looked_in)


def _with_looked_in(st: WeightsStatus, looked_in: list[str]) -> WeightsStatus:
    return WeightsStatus(st.repo_id, st.revision, st.resolved_revision, st.path,
                         st.present, st.size_bytes, tuple(looked_in), st.missing)


def fetch_command(repo_id: str, revision: str | None) -> str:
    """Command to run on a connected machine to populate the cache.

    `hf download` ships with huggingface_hub >= 0.34 and is the same as the
    older `huggingface-cli download`.
    """
    cmd = f"hf download {shlex.quote(repo_id)}"
    return cmd + (f" --revision {shlex.quote(revision)}" if revision else "")


def missing_weights_message(st: WeightsStatus) -> str:
    """One paragraph saying what is missing, where we looked, and every way out."""
    rev = f"@{st.revision}" if st.revision else "@unpinned (refs/main)"
    where = ", ".join(st.looked_in) or "(nowhere)"
    what = ", ".join(st.missing) or "(nothing reported)"
    return (
        f"Weights for {st.repo_id}{rev} were not found locally (offline; nothing is "
        f"downloaded). Looked in: {where}. Missing: {what}. "
        f"On a machine with network access run `{fetch_command(st.repo_id, st.revision)}`, "
        f"then copy its hub cache directory to this machine and set HF_HUB_CACHE "
        f"to it; or pass an explicit directory holding config.json and the "
        f"*.safetensors files with `rung.path=/dir`; or use `rung.init=random` to "
        f"train the architecture from random weights without any download."
    )
