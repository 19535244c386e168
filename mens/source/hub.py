"""Fetch a model from the Hugging Face Hub when it is missing: only what mens needs, resumable.

Two fetches, at two moments of a run:
- `fetch_meta` before planning: config.json and the tokenizer files only (kilobytes), so the
  planner can read the architecture and measure data lengths in tokens. It imports no torch or
  transformers: planning calls it.
- `download_weights` after the plan fits, before training: the safetensors (+ index), config,
  generation config and tokenizer — never .bin/.pth/.gguf/onnx or `original/` copies of the same
  weights (NEEDED). huggingface_hub's snapshot_download does the work, with its own progress bars.

A third, `fetch_adapter`, brings a pushed PEFT adapter (`adapter=org/name[@rev]`): its config,
safetensors weights, card and tokenizer files only.

All three look in the local hub cache first (mens.source.weights' cache walk: no network, no
huggingface_hub import when the files are there) and return (snapshot dir, commit). The commit is
what spec.yaml records, so a re-run loads the same snapshot even after `main` moves.

Resuming, as huggingface_hub 2.4 does it: a dropped connection is resumed in place with a Range
request (up to 5 times); an interrupted run keeps every file that completed (each is renamed into
the cache when whole) and a re-run fetches only the rest. 2.4 writes each file to a per-process
temporary name and deletes it on failure, so a half-transferred file restarts from zero.

The token comes from the HF_TOKEN environment variable only (not from `hf auth login`'s file, not
from config), is handed to huggingface_hub and never written or printed. Every failure the user
can fix is a ConfigError (exit 2, key `rung`, or `adapter`) in one paragraph with the way out.
"""
from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

from mens.errors import ConfigError
from mens.source.weights import fetch_command, find_weights, hub_cache_dirs, missing_weights_message
from mens.run.rundir import atomic_write

TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
             "chat_template.jinja", "tokenizer.model",
             "vocab.json", "merges.txt", "added_tokens.json")   # slow-tokenizer files: kilobytes
META = ("config.json", *TOKENIZER)
# "model*.safetensors", not "*.safetensors": Mistral-style repos also ship consolidated.safetensors,
# a second copy of the same weights in another layout (and fnmatch's * crosses "/", so
# "*.safetensors" would take original/*.safetensors too).
NEEDED = ("model*.safetensors", "model.safetensors.index.json", "config.json",
          "generation_config.json", *TOKENIZER)
# A pushed PEFT adapter: its config and safetensors weights, its card, and a tokenizer when it
# ships one (never checkpoints, optimizer states or GGUF copies a repo may also hold)
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "README.md", *TOKENIZER)
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


# --- public API ------------------------------------------------------------------------------
def fetch_meta(repo_id: str, revision: str | None = None,
               allow_download: bool = True) -> tuple[Path, str]:
    """config.json + tokenizer files of `repo_id@revision`: (snapshot dir, commit).

    The local cache first (no network); otherwise a download of META only, unless offline or
    `allow_download` is false (ConfigError with the `hf download` command)."""
    local = _cached_snapshot(repo_id, revision, _has_meta)
    if local is not None:
        return local
    _refuse_if_offline(repo_id, revision, allow_download, META, what="config.json and tokenizer")
    path, commit = _snapshot(repo_id, revision, META)
    if not (path / "config.json").is_file():
        raise ConfigError(f"{repo_id}@{commit} has no config.json: it is not a transformers model "
                          f"repository; set rung.repo_id to one that is.", key="rung")
    return path, commit


def download_weights(repo_id: str, revision: str | None = None,
                     allow_download: bool = True) -> tuple[Path, str]:
    """The weights mens trains on (NEEDED): (snapshot dir, commit).

    Present in the cache (config + every shard + a tokenizer) → no network at all. Else a
    snapshot_download of NEEDED. `allow_download=False` is rung.download=false: today's
    never-download behaviour and message."""
    st = find_weights(repo_id, revision)
    if st.present and _has_tokenizer(Path(st.path)):
        return Path(st.path), st.resolved_revision or Path(st.path).name
    if not allow_download:
        raise ConfigError(missing_weights_message(st), key="rung")
    _refuse_if_offline(repo_id, revision, allow_download, NEEDED, what="weights")
    path, commit = _snapshot(repo_id, revision, NEEDED)
    got = find_weights(repo_id, commit, path=str(path))
    if not got.present:
        raise ConfigError(f"{repo_id}@{commit} holds no usable safetensors weights (missing: "
                          f"{', '.join(got.missing)}); mens loads model*.safetensors only, not "
                          f".bin/.pth/.gguf. Pick a repository with safetensors weights.",
                          key="rung")
    return path, commit


def fetch_adapter(ref: str) -> tuple[Path, dict]:
    """`adapter=`: a local PEFT adapter dir (returned as is) or a Hub repo `org/name[@revision]`.

    Returns (local dir, source): {"path"} for a dir, {"repo_id", "revision", "commit"} for the
    Hub, the commit being what a rerun pins (`org/name@<commit>`). The hub cache first: a
    snapshot holding adapter_config.json + weights answers without any network. Else a
    snapshot_download of ADAPTER_FILES only. Failures: ConfigError key `adapter`, one paragraph."""
    ref = str(ref).strip()
    local = Path(ref).expanduser()
    if local.is_dir():
        if not is_adapter_dir(local) and is_adapter_dir(local / "adapter"):
            local = local / "adapter"          # a finished run dir: its adapter/
        if not is_adapter_dir(local):
            raise ConfigError(f"adapter={ref} is a directory without a PEFT adapter: it needs "
                              f"adapter_config.json and adapter_model.safetensors (or .bin). "
                              f"Give a run dir (or its adapter/), or a Hub repo as "
                              f"`adapter=ORG/NAME`.", key="adapter")
        return local.resolve(), {"path": str(local.resolve())}
    repo_id, at, revision = ref.partition("@")
    if not REPO_ID.match(repo_id) or "@" in revision or (at and not revision):
        raise ConfigError(f"adapter={ref} is neither a directory here nor a Hub repo id: give a "
                          f"local PEFT adapter dir, or `adapter=ORG/NAME` (optionally "
                          f"`@REVISION`, a branch, tag or commit).", key="adapter")
    revision = revision or None
    cached = _cached_snapshot(repo_id, revision, is_adapter_dir)
    if cached is None:
        if offline():
            raise ConfigError(_offline_message(repo_id, revision, ADAPTER_FILES, "adapter files",
                                               f"{offline_by()} forbids downloading", "adapter"),
                              key="adapter")
        cached = _snapshot(repo_id, revision, ADAPTER_FILES, key="adapter")
        if not is_adapter_dir(cached[0]):
            raise ConfigError(f"{repo_id}@{cached[1]} holds no PEFT adapter (adapter_config.json "
                              f"+ adapter_model.safetensors): is it a model rather than an "
                              f"adapter? A whole model is a base: `+rung=hf rung.repo_id="
                              f"{repo_id}`.", key="adapter")
    path, commit = cached
    return path, {"repo_id": repo_id, "revision": revision, "commit": commit}


def is_adapter_dir(d: Path) -> bool:
    d = Path(d)
    return (d / "adapter_config.json").is_file() and any((d / w).is_file()
                                                         for w in ADAPTER_WEIGHTS)


def portable_adapter(adapter_dir: Path | str, repo_id: str, revision: str | None) -> Path:
    """Make adapter_config.json name the base by hub id and commit instead of a local path.

    PEFT's AutoPeftModelForCausalLM.from_pretrained(adapter_dir) calls
    `from_pretrained(config.base_model_name_or_path, revision=config.revision)`, so with the hub
    id and the commit the adapter loads on any machine that has (or may download) that snapshot,
    and always the same one. Written atomically; returns the config's path."""
    path = Path(adapter_dir) / "adapter_config.json"
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read the adapter config ({e}); is {adapter_dir} a "
                          f"PEFT adapter directory?", key="rung") from None
    cfg["base_model_name_or_path"] = repo_id
    cfg["revision"] = revision
    return atomic_write(path, json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def download_command(repo_id: str, revision: str | None, patterns=NEEDED) -> str:
    """`hf download …` for exactly these files (the CLI takes --include once per pattern)."""
    return fetch_command(repo_id, revision) + "".join(
        f" --include {shlex.quote(p)}" for p in patterns)


# --- local cache ---------------------------------------------------------------------------
def _has_tokenizer(d: Path) -> bool:
    return any((d / name).is_file() for name in ("tokenizer.json", "tokenizer.model",
                                                   "vocab.json"))


def _has_meta(d: Path) -> bool:
    return (d / "config.json").is_file() and _has_tokenizer(d)


def _cached_snapshot(repo_id: str, revision: str | None, complete) -> tuple[Path, str] | None:
    """The first cached snapshot of repo_id@revision for which complete(dir) holds, or None.
    Same layout walk as mens.source.weights (refs/<branch> → snapshots/<commit>)."""
    folder = "models--" + repo_id.replace("/", "--")
    for cache in hub_cache_dirs():
        repo_dir = cache / folder
        ref = repo_dir / "refs" / (revision or "main")
        commit = ref.read_text().strip() if ref.is_file() else revision
        if commit and complete(repo_dir / "snapshots" / commit):
            return repo_dir / "snapshots" / commit, commit
    return None


# --- network ---------------------------------------------------------------------------------
def offline_by() -> str | None:
    """The setting that puts this process offline (`NAME=value`), or None: the one owner of
    that rule in mens. It is huggingface_hub's (constants.HF_HUB_OFFLINE =
    _is_true(HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE)): the first of the two that is set and
    non-empty decides, true when 1/ON/YES/TRUE — so HF_HUB_OFFLINE=0 keeps a process online
    whatever TRANSFORMERS_OFFLINE says. Read now: huggingface_hub reads it once, at import."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        value = os.environ.get(name)
        if value:
            return f"{name}={value}" if value.upper() in ("1", "ON", "YES", "TRUE") else None
    return None


def offline() -> bool:
    return offline_by() is not None


def endpoint() -> str:
    """HF_ENDPOINT read now (huggingface_hub reads it once, at import), without a trailing /."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def _refuse_if_offline(repo_id, revision, allow_download, patterns, what: str) -> None:
    if not allow_download:
        reason = "rung.download=false forbids downloading"
    elif offline():
        reason = f"{offline_by()} forbids downloading"
    else:
        return
    raise ConfigError(_offline_message(repo_id, revision, patterns, what, reason), key="rung")


def _offline_message(repo_id, revision, patterns, what: str, reason: str,
                     key: str = "rung") -> str:
    rev = f"@{revision}" if revision else "@main (unpinned)"
    where = ", ".join(str(c) for c in hub_cache_dirs())
    return (f"The {what} of {repo_id}{rev} are not in the local hub cache ({where}) and "
            f"{reason}. On a machine with network access run "
            f"`{download_command(repo_id, revision, patterns)}`, then copy its hub cache to this "
            f"machine and set HF_HUB_CACHE to it (or unset HF_HUB_OFFLINE and "
            f"TRANSFORMERS_OFFLINE here); "
            f"{HINTS[key]['local']}.")


def http_lib():
    """The HTTP library huggingface_hub raises from: httpx2 in 2.x (a fork of httpx), else httpx."""
    try:
        import httpx2 as http
    except ImportError:
        import httpx as http
    return http


def _snapshot(repo_id: str, revision: str | None, patterns,
              key: str = "rung") -> tuple[Path, str]:
    """snapshot_download of `patterns` into the first hub cache; (snapshot dir, commit)."""
    from huggingface_hub import snapshot_download

    cache = hub_cache_dirs()[0]   # the one huggingface_hub itself would use, read now
    try:
        path = snapshot_download(repo_id, revision=revision, allow_patterns=list(patterns),
                                 cache_dir=str(cache), endpoint=endpoint(),
                                 token=os.environ.get("HF_TOKEN") or False)
    except (OSError, http_lib().HTTPError, ValueError) as e:
        raise ConfigError(_explain(e, repo_id, revision, patterns, key), key=key) from None
    path = Path(path)
    return path, path.name   # snapshots/<commit>: the resolved commit, whatever `revision` was


def exception_chain(e: BaseException):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


# What to change, per config key a download serves: the base (`rung`) or a PEFT adapter
HINTS = {
    "rung": {"local": "or pass a local model directory with `rung.path=/dir`; or use "
                      "`rung.init=random`",
             "repo": "check rung.repo_id",
             "revision": "set rung.revision to a branch, tag or commit of {page} (or null "
                         "for main)",
             "offline": "or set rung.download=false and rung.path=/dir"},
    "adapter": {"local": "or pass the adapter's local directory as `adapter=/dir`",
                "repo": "check `adapter=ORG/NAME`",
                "revision": "name a branch, tag or commit of {page} as `adapter=ORG/NAME@REV` "
                            "(or drop @REV for main)",
                "offline": "or pass the adapter's local directory as `adapter=/dir`"},
}


def _explain(e: BaseException, repo_id: str, revision: str | None, patterns,
             key: str = "rung") -> str:
    """One paragraph for a failed download: the most specific cause in the exception chain."""
    from huggingface_hub import errors as hf

    page, token = f"{endpoint()}/{repo_id}", bool(os.environ.get("HF_TOKEN"))
    rev = f"@{revision}" if revision else ""
    cmd = download_command(repo_id, revision, patterns)
    chain = list(exception_chain(e))
    first = lambda *types: next((x for x in chain if isinstance(x, types)), None)  # noqa: E731
    if first(hf.GatedRepoError):
        if token:
            return (f"{repo_id} is a gated model and the token in HF_TOKEN has no access to it: "
                    f"accept its licence on {page} with the account the token belongs to (access "
                    f"may also await the authors' approval), then re-run.")
        return (f"{repo_id} is a gated model: accept its licence on {page}, create a read token "
                f"at {endpoint()}/settings/tokens and set it in the environment as HF_TOKEN "
                f"(never in a config file), then re-run.")
    if first(hf.RevisionNotFoundError):
        return (f"revision {revision!r} does not exist in {repo_id}: "
                f"{HINTS[key]['revision'].format(page=page)}.")
    if first(hf.RepositoryNotFoundError):
        return (f"{repo_id} was not found on {endpoint()} (or it is private and "
                f"{'HF_TOKEN has no access to it' if token else 'HF_TOKEN is not set'}): "
                f"{HINTS[key]['repo']}.")
    if first(hf.OfflineModeIsEnabled):
        # huggingface_hub's own flag (read at import) may say offline where the environment no
        # longer does
        return _offline_message(repo_id, revision, patterns, "files",
                                f"{offline_by() or 'HF_HUB_OFFLINE=1'} forbids downloading", key)
    http = first(hf.HfHubHTTPError)
    status = http.response.status_code if http is not None and http.response is not None else 0
    if status in (401, 403):
        return (f"{endpoint()} refused {repo_id}{rev} (HTTP {status}): "
                f"{'the token in HF_TOKEN has no access to it' if token else 'it needs a token'}"
                f"; set HF_TOKEN in the environment to a token with read access, then re-run.")
    lib = http_lib()
    if first(lib.ConnectError, lib.TimeoutException, lib.NetworkError):
        return (f"could not reach {endpoint()} to download {repo_id}{rev} (no network?). On a "
                f"machine with network access run `{cmd}`, then copy its hub cache here and set "
                f"HF_HUB_CACHE to it; {HINTS[key]['offline']}.")
    what = f"HTTP {status}" if status else f"{type(e).__name__}: {e}"
    return (f"downloading {repo_id}{rev} from {endpoint()} failed ({what}). Files that "
            f"completed stay in the hub cache: re-run to fetch the rest, or run `{cmd}`.")
