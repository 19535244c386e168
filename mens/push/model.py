"""Assemble what `mens push` uploads: `<run dir>/push/` holds exactly the repos' files.

    push/model/   → push.repo: the adapter in PEFT layout (adapter_config.json naming the base
                    by hub id + commit; adapter_model.safetensors) + README.md (the card);
                    a full-lane run: its model/ instead. push.merged=true: + merged/ (base +
                    adapter, from the export; `from_pretrained(repo, subfolder="merged")`)
    push/gguf/    → push.gguf_repo (null: <push.repo>-GGUF), push.gguf=true only: the export's
                    GGUFs renamed to the GGUF naming convention, the Modelfile(s) rewritten to
                    those names, and a GGUF card (base_model: the adapter repo, quantized)
    push/push.json  the manifest: each repo (id, type, folder) and each file (bytes, sha256);
                    mens.push.run adds the upload results

GGUF names: ggml's GGUF naming convention (github.com/ggml-org/ggml/blob/master/docs/gguf.md,
"GGUF Naming Convention": `<BaseName>-<SizeLabel>-<FineTune>-<Version>-<Encoding>-<Type>.gguf`,
Type `LoRA` for adapters), as Hub GGUF repos use it (`Mixtral-8x7B-Instruct-v0.1-Q4_K_M.gguf`):
`tiny-vox-Q8_0.gguf`, `tiny-vox-F32-LoRA.gguf`, the base the LoRA applies to `tiny-F16.gguf`.

Small files are copied; big ones hard-linked (a 16 GB merged model is not duplicated; copied
when the link fails, e.g. across file systems). The folder is filled under a temp name and
renamed when complete (RunDir.save_dir), so a push never uploads half an assembly.
"""
from __future__ import annotations

import copy
import json
import os
import re
import shutil
import time
from pathlib import Path

from mens.errors import ConfigError
from mens.run.hashing import sha256
from mens.run.receipt import artifact_sha256
from mens.run.rundir import RunDir, atomic_write

PUSH, MANIFEST, MODEL_DIR, GGUF_DIR = "push", "push.json", "model", "gguf"
LINK_ABOVE = 1 << 20          # bytes: bigger files are hard-linked, smaller ones copied
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def check(run_dir, push_cfg) -> RunDir:
    """Everything a push needs that costs nothing to check (before the token, before a byte)."""
    if not run_dir:
        raise ConfigError("no run given: `mens push run=<run dir> push.repo=<org/name>` (a "
                          "finished run, e.g. outputs/<date>/<time>_train).", key="run")
    rd = RunDir(Path(str(run_dir)).expanduser().resolve())
    if not rd.path.is_dir():
        raise ConfigError(f"run={run_dir}: no such directory. Give a run dir mens trained into "
                          f"(outputs/<date>/<time>_train).", key="run")
    if not rd.finished:
        raise ConfigError(f"run={run_dir} has no summary.json: the run is unfinished (or not a "
                          f"mens run dir). Push a finished run, or resume this one first "
                          f"(`python -m mens resume={run_dir}`).", key="run")
    if rd.artifact is None:
        raise ConfigError(f"run={run_dir} holds neither adapter/ nor model/: nothing to push. "
                          f"Give the run dir whose training saved its weights.", key="run")
    for key, repo in (("push.repo", push_cfg.repo), ("push.gguf_repo", push_cfg.gguf_repo)):
        if key == "push.gguf_repo" and repo is None:
            continue
        if not repo or not REPO_ID.match(str(repo)) or not _hub_valid(str(repo)):
            raise ConfigError(f"{key}={repo}: a Hub repository is `org/name` (your user or "
                              f"organisation, a slash, a name of letters, digits, `-`, `_`, "
                              f"`.`), e.g. `{key}=me/{rd.path.name or 'my-adapter'}`.", key=key)
    return rd


def _hub_valid(repo: str) -> bool:
    """huggingface_hub's own repo-id rules (no `--` or `..`, no trailing `.git`, ≤ 96 chars)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError:
        return False
    return True


def gguf_repo(push_cfg) -> str:
    return push_cfg.gguf_repo or f"{push_cfg.repo}-GGUF"


def assemble(run_dir, push_cfg, out=None, *, export_cfg=None, rung_path=None) -> dict:
    """Write into `out` (default <run dir>/push/) exactly what a push of this run uploads and
    return the manifest (also out/push.json). export_cfg (cfg.export): how to export when
    merged/GGUFs are asked and the run has no export yet; rung_path: cfg.rung.path."""
    from mens.push.base import LICENSE_FILE, license_file
    from mens.push.card import model_card
    from mens.push.usage import gguf_card

    rd = check(run_dir, push_cfg)
    out = Path(out) if out else rd / PUSH
    notes: list[str] = []
    export = _export(rd, push_cfg, export_cfg, rung_path, notes) \
        if (push_cfg.merged or push_cfg.gguf) else None
    name, grepo = push_cfg.repo.split("/")[1], gguf_repo(push_cfg)
    names = gguf_names(rd, export, name) if push_cfg.gguf else {}

    def fill(tmp: Path) -> None:
        mdir = tmp / MODEL_DIR
        _artifact(rd, mdir)
        if push_cfg.merged and export:
            for f in export["files"]:
                if f["kind"] == "merged":
                    _place(export["dir"] / f["path"], mdir / f["path"])
        atomic_write(mdir / "README.md", model_card(
            rd.path, push_cfg.repo, grepo if push_cfg.gguf else None,
            {new: what for _, (new, what) in names.items()}))
        terms = license_file(rd.path)       # the card says license: other → its license_link
        if terms:
            atomic_write(mdir / LICENSE_FILE, terms)
        if push_cfg.gguf:
            gdir = tmp / GGUF_DIR
            for old, (new, _) in names.items():
                src = export["dir"] / old
                if old.startswith("Modelfile"):
                    atomic_write(gdir / new, rewrite_modelfile(src.read_text(), names, grepo))
                else:
                    _place(src, gdir / new)
            atomic_write(gdir / "README.md", gguf_card(
                rd.path, grepo, push_cfg.repo, {new: what for _, (new, what) in names.items()}))
            if terms:
                atomic_write(gdir / LICENSE_FILE, terms)
        repos = [_repo(tmp, MODEL_DIR, push_cfg.repo, push_cfg)]
        if push_cfg.gguf:
            repos.append(_repo(tmp, GGUF_DIR, grepo, push_cfg))
        manifest.update(repos=repos)
        atomic_write(tmp / MANIFEST, json.dumps(manifest, indent=2))

    manifest = {"kind": "mens.push", "version": 1, "run": str(rd.path),
                "artifact": rd.artifact_kind, "artifact_sha256": artifact_sha256(rd.path),
                "dry_run": bool(push_cfg.dry_run), "merged": bool(push_cfg.merged),
                "gguf": bool(push_cfg.gguf), "notes": notes,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    out.parent.mkdir(parents=True, exist_ok=True)
    RunDir(out.parent).save_dir(out.name, fill)
    return manifest


def _artifact(rd: RunDir, dest: Path) -> None:
    """The trained weights in the layout the Hub's loaders read; the run's own files untouched."""
    from mens.push.base import base_identity

    src = rd.artifact
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src)
        if p.is_file() and rel.as_posix() != "README.md":    # PEFT's stub card: ours replaces it
            _place(p, dest / rel)
    if rd.artifact_kind == RunDir.ADAPTER:
        from mens.source.hub import portable_adapter

        base = base_identity(rd.read_spec())
        # a COPY (_place copies small files): adapter_config.json names the base by hub id and
        # commit instead of this machine's path (None when the run recorded no hub commit)
        portable_adapter(dest, base["repo_id"], base["revision"])


def _place(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.stat().st_size > LINK_ABOVE:
        try:
            os.link(src, dst)
            return
        except OSError:          # another file system, or links refused: a copy, said once
            print(f"mens push: note: could not hard-link {src.name}; copying it")
    shutil.copy2(src, dst)


def _repo(tmp: Path, folder: str, repo_id: str, push_cfg) -> dict:
    files = [{"path": p.relative_to(tmp / folder).as_posix(), "bytes": p.stat().st_size,
              "sha256": sha256(p)} for p in sorted((tmp / folder).rglob("*")) if p.is_file()]
    return {"repo_id": repo_id, "repo_type": "model", "folder": folder,
            "private": bool(push_cfg.private), "branch": push_cfg.branch,
            "revision": push_cfg.revision, "files": files}


def gguf_names(rd: RunDir, export: dict | None, name: str) -> dict[str, tuple[str, str]]:
    """{export's file name: (name in the GGUF repo, what it is)} per the GGUF naming convention."""
    base = str(rd.read_spec().get("rung", {}).get("repo_id") or "base").split("/")[-1]
    base = f"{base}-base" if base == name else base
    out = {}
    for f in (export or {}).get("files", []):
        q = str(f.get("quant") or "").upper()
        if f["kind"] == "gguf":
            out[f["path"]] = (f"{name}-{q}.gguf", f"model: {name} merged, {q}")
        elif f["kind"] == "adapter_gguf":
            out[f["path"]] = (f"{name}-{q}-LoRA.gguf", f"LoRA adapter ({q}) for {base}-*.gguf")
        elif f["kind"] == "base_gguf":
            out[f["path"]] = (f"{base}-{q}.gguf", f"base model the LoRA applies to, {q}")
        elif f["kind"] == "modelfile":
            out[f["path"]] = (f["path"], "Ollama Modelfile" + (
                " (merged model)" if f["path"].endswith(".merged") else ""))
    return out


def rewrite_modelfile(text: str, names: dict[str, tuple[str, str]], repo: str) -> str:
    """The export's Modelfile with FROM/ADAPTER naming the renamed GGUFs, and a header that
    names the repo instead of this machine's run path."""
    lines = []
    for line in text.splitlines():
        m = re.match(r"^(FROM|ADAPTER)\s+\./(\S+)\s*$", line)
        if m and m.group(2) in names:
            line = f"{m.group(1)} ./{names[m.group(2)][0]}"
        elif line.startswith("# Ollama Modelfile written by"):
            line = f"# Ollama Modelfile of {repo}, written by `mens export` / `mens push`."
        lines.append(line)
    return "\n".join(lines) + "\n"


def _export(rd: RunDir, push_cfg, export_cfg, rung_path, notes: list[str]) -> dict:
    """The run's export manifest (+ "dir"), running `mens export` when it lacks what the push
    asks for (said loudly and recorded in push.json's notes)."""
    from omegaconf import OmegaConf

    from mens.config.schema import ExportConfig

    ex = OmegaConf.structured(ExportConfig) if export_cfg is None else copy.deepcopy(export_cfg)
    where = Path(ex.out).expanduser().resolve() if ex.out else rd.export
    have = json.loads((where / "export.json").read_text()) \
        if (where / "export.json").is_file() else None
    kinds = {f["kind"] for f in (have or {}).get("files", [])}
    lacks = [what for what, asked, got in (
        ("merged/", push_cfg.merged and rd.artifact_kind == RunDir.ADAPTER, "merged" in kinds),
        ("GGUFs", push_cfg.gguf, "gguf" in kinds)) if asked and not got]
    if push_cfg.merged and rd.artifact_kind == RunDir.MODEL:
        notes.append("push.merged=true on a full-lane run: model/ already is the full model; "
                     "nothing merged is added")
    if lacks:
        msg = (f"{where} lacks {' and '.join(lacks)}: running `mens export run={rd.path}` "
               f"now (export.gguf={list(ex.gguf)}, merged={bool(ex.merged or push_cfg.merged)})")
        print(f"mens push: {msg}")
        notes.append(msg)
        have = _run_export(rd, ex, push_cfg, where, rung_path)
    if push_cfg.gguf and not any(f["kind"] == "gguf" for f in have["files"]):
        raise ConfigError(f"push.gguf=true but the export at {where} wrote no model GGUF "
                          f"(export.gguf={list(ex.gguf)}): set export.gguf=[f16,q8_0] (or "
                          f"another type) or drop push.gguf.", key="push.gguf")
    return {**have, "dir": where}


def _run_export(rd: RunDir, ex, push_cfg, where: Path, rung_path) -> dict:
    """`python -m mens.export` (the export stage's public entry, as a user runs it) with
    cfg.export; a refusal (e.g. a random-init base: nothing to merge into) becomes push's."""
    import subprocess
    import sys

    def val(v) -> str:
        return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)

    args = [f"run={rd.path}", f"export.out={where}", f"export.gguf=[{','.join(ex.gguf)}]",
            f"export.merged={val(bool(ex.merged or push_cfg.merged))}",
            *(f"export.{k}={val(ex[k])}" for k in ("dtype", "adapter_gguf", "base_gguf",
                                                   "modelfile", "verify"))]
    if rung_path:
        args.append(f"rung.path={Path(rung_path).expanduser().resolve()}")
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    p = subprocess.run([sys.executable, "-m", "mens.export", *args], stderr=subprocess.PIPE,
                       text=True, env=env, cwd=rd.path)
    if p.returncode != 0:
        said = [x for x in p.stderr.splitlines() if x.startswith("mens: error")]
        why = said[-1].split("): ", 1)[-1] if said else p.stderr.strip()[-2000:]
        key = "push.gguf" if push_cfg.gguf else "push.merged"
        raise ConfigError(f"{key}=true needs an export of the run, and `mens export` refused "
                          f"it (exit {p.returncode}): {why}", key=key)
    return json.loads((where / "export.json").read_text())
