"""Where a rung's model comes from, before anything loads: `+rung=hf` fills its architecture
from the model's own config.json (rung.path, the local hub cache, or — when allowed — config.json
and the tokenizer fetched alone from the Hub), `+rung=smol` / `+rung=gguf` from a GGUF's metadata
(mens.source.gguf: its sha256 recorded as rung.commit), and a training run's weights are located
or scheduled for download (`rung.download`), their commit recorded.

Planning stays free of torch and transformers: config.json is plain JSON
(mens.source.families.rung_fields) and huggingface_hub is imported only when a fetch is needed.
"""
from __future__ import annotations

from pathlib import Path

from mens.errors import ConfigError
from mens.source.families import LINEAR_FIELDS, MOE_FIELDS, read_config
from mens.source.gguf import is_gguf
from mens.source.hub import offline, offline_by   # the one rule (huggingface_hub's)
from mens.resources import ASSETS

ARCH_FIELDS = ("family", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
               "tie_word_embeddings", "max_position_embeddings", "rope_theta", "rms_norm_eps",
               *MOE_FIELDS, "linear_attention_layers", *LINEAR_FIELDS)


def meta_dir(rung, allow_fetch: bool = True) -> Path | None:
    """The directory holding the rung's config.json and tokenizer (None: not here and not
    fetchable now). The tiny rung's is the package's; rung.path's is itself."""
    if is_gguf(rung):   # its tokenizer is in the dequantized directory, once made
        from mens.source.gguf import converted_dir
        return converted_dir(rung)
    if rung.path:
        return Path(rung.path)
    if rung.tokenizer_bundled:
        return ASSETS / rung.name
    from mens.source.hub import fetch_meta   # walks the cache first: no network when present

    try:
        return fetch_meta(rung.repo_id, rung.commit or rung.revision,
                          allow_download=allow_fetch and rung.download and not offline())[0]
    except ConfigError:
        if not allow_fetch:
            return None
        raise


def cached_config_dir(repo_id: str | None, revision: str | None) -> Path | None:
    """A hub-cache snapshot of repo_id@revision holding config.json (no network)."""
    from mens.source.weights import hub_cache_dirs

    if not repo_id:
        return None
    for cache in hub_cache_dirs():
        repo = cache / ("models--" + repo_id.replace("/", "--"))
        ref = repo / "refs" / (revision or "main")
        commit = ref.read_text().strip() if ref.is_file() else revision
        if commit and (repo / "snapshots" / commit / "config.json").is_file():
            return repo / "snapshots" / commit
    return None


def fill_hf_rung(cfg, notes: list[str]) -> None:
    """`+rung=hf`: architecture fields from config.json; the rung named after the model.
    `+rung=smol` / `+rung=gguf`: from the GGUF's metadata (fill_gguf)."""
    rung = cfg.rung
    if is_gguf(rung):
        return fill_gguf(rung, notes)
    if rung.name == "gguf":
        raise ConfigError(f"`+rung=gguf` needs the file: `rung.path=model.gguf` (a path ending "
                          f".gguf; got {rung.path}).", key="rung.path")
    if not rung.repo_id and not rung.path:
        raise ConfigError("`+rung=hf` needs the model: `rung.repo_id=ORG/NAME` (a Hugging Face "
                          "model id) or `rung.path=/dir` (a directory with config.json).",
                          key="rung.repo_id")
    if rung.path and not (Path(rung.path) / "config.json").is_file():
        raise ConfigError(f"rung.path={rung.path} holds no config.json: point it at a Hugging "
                          f"Face model directory (config.json, tokenizer, safetensors).",
                          key="rung.path")
    try:
        where = meta_dir(rung)
    except ConfigError:   # offline or not allowed: a cached config.json alone still plans
        where = cached_config_dir(rung.repo_id, rung.commit or rung.revision)
        if where is None:
            raise
        notes.append(f"rung: {rung.repo_id}'s config.json is cached but not its tokenizer: token "
                     f"lengths are estimated")
    fields = read_config(where, notes)
    for k in ARCH_FIELDS:
        rung[k] = fields[k]
    if rung.name == "hf":
        rung.name = (rung.repo_id or str(Path(rung.path).resolve())).rstrip("/").split("/")[-1]


def fill_gguf(rung, notes: list[str]) -> None:
    """A GGUF rung's architecture from its metadata, its sha256 as rung.commit (a rerun whose
    file changed is exit 2), rung.path made absolute, `+rung=gguf` named after the file."""
    from mens.source.gguf import gguf_fields

    fields, sha = gguf_fields(rung, notes)
    if rung.commit and rung.commit != sha:   # a rerun's spec.yaml names the file it used
        raise ConfigError(f"rung.path={rung.path}: its sha256 is {sha}, not rung.commit="
                          f"{rung.commit} that this run used: the GGUF changed. Point "
                          f"rung.path at the original file (or drop rung.commit).",
                          key="rung.commit")
    for k in ARCH_FIELDS:
        rung[k] = fields[k]
    rung.commit = sha
    if not rung.wheel:   # spec.yaml reruns from any directory
        rung.path = str(Path(rung.path).expanduser().resolve())
    if rung.name == "gguf":
        rung.name = Path(rung.path).name.rsplit(".", 1)[0]


def rung_tool_format(cfg, notes: list[str]) -> None:
    """data.tool_format=native on a rung whose template writes no tool calls (rung.tool_format:
    smol's ChatML) becomes the rung's format, said: native would refuse every tool record."""
    want = cfg.rung.get("tool_format")
    if want and want != "native" and cfg.data.tool_format == "native":
        cfg.data.tool_format = want
        notes.append(f"data.tool_format=native → {want}: {cfg.rung.name}'s chat template writes "
                     f"no tool calls, so tool records are written as {want} calls "
                     f"(rung.tool_format)")


def check_weights(cfg, notes: list[str]) -> None:
    """A training run's pretrained weights: present (their commit recorded), or to be downloaded
    after the plan fits (rung.download, online), or exit 2 with the `hf download` command."""
    from mens.source.weights import find_weights, missing_weights_message

    rung = cfg.rung
    if is_gguf(rung):   # the file was found and read by fill_hf_rung; dequantized at load
        return
    st = find_weights(rung.repo_id, rung.commit or rung.revision, rung.path)
    if st.present:
        if not rung.path and st.resolved_revision and not rung.commit:
            rung.commit = st.resolved_revision
        return
    if rung.path or not rung.download or offline():
        msg = missing_weights_message(st)
        if offline() and rung.download and not rung.path:
            msg += f" ({offline_by()}: mens does not download while offline.)"
        raise ConfigError(msg, key="rung")
    notes.append(f"weights: {rung.repo_id}@{rung.revision or 'main'} is not in the local cache; "
                 f"it is downloaded after the plan fits (rung.download=false to never download)")


def ensure_weights(spec):
    """After the plan fits: download missing weights (huggingface_hub's snapshot_download, its
    own progress bars) and return the spec with the snapshot's commit in rung.commit."""
    from dataclasses import replace

    from mens.source.weights import find_weights

    rung = spec.rung
    if rung.init != "pretrained" or rung.tokenizer_bundled or rung.path:
        return spec
    st = find_weights(rung.repo_id, rung.commit or rung.revision)
    if st.present and rung.commit:
        return spec
    from mens.source.hub import download_weights

    _, commit = download_weights(rung.repo_id, rung.commit or rung.revision,
                                 allow_download=rung.download and not offline())
    return replace(spec, rung=replace(rung, commit=commit))


def fetch_base(rung) -> str | None:
    """A base named by Hub id and missing here (`+rung=hf rung.repo_id=…`, a run trained
    elsewhere) downloaded for eval / serve as training does after its plan fits; `rung` (a
    DictConfig or dict) gets the snapshot's commit. rung.download=false or HF_HUB_OFFLINE=1: the
    cache only, else exit 2 saying how to fetch it. Returns the commit (None: nothing to fetch)."""
    get = rung.get
    if get("init", "pretrained") != "pretrained" or get("tokenizer_bundled") or get("path") \
            or not get("repo_id"):
        return None
    from mens.source.hub import download_weights

    _, commit = download_weights(rung["repo_id"], get("commit") or get("revision"),
                                 allow_download=bool(get("download", True)) and not offline())
    if commit != get("commit"):
        print(f"mens: base {rung['repo_id']}@{get('revision') or 'main'} is commit {commit}")
        rung["commit"] = commit
    return commit
