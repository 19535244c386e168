"""`mens push run=DIR push.repo=ORG/NAME` (task): validate → assemble → upload.

1. check the run and the repo names (mens.push.model.check: no byte read yet);
2. a real push: the token (mens.push.hub.require_token: HF_TOKEN, HF_HUB_OFFLINE) BEFORE the
   assembly, so a missing token never costs an export or a 16 GB hard-link pass;
3. assemble <run>/push/ (mens.push.model.assemble) — push.dry_run=true stops here: the file
   list, "uploaded nothing", exit 0;
4. upload push/model → push.repo and push/gguf → push.gguf_repo (null: <repo>-GGUF) through
   mens.push.hub.upload (one commit per repo; unchanged files are not sent), then print one
   line per repo and record each result in <run>/push/push.json.
"""
from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig

from mens.errors import EXIT_OK
from mens.run.rundir import atomic_write


def task(cfg: DictConfig, out_dir: Path) -> int:
    from mens.push.model import MANIFEST, PUSH, assemble, check, gguf_repo

    p = cfg.push
    rd = check(cfg.run, p)
    if not p.dry_run:
        # lazy: the upload client (and huggingface_hub's HTTP stack) only when uploading
        from mens.push.hub import require_token
        require_token(p.repo)
        if p.gguf:
            require_token(gguf_repo(p))
    out = rd / PUSH
    manifest = assemble(rd.path, p, out, export_cfg=cfg.export, rung_path=cfg.rung.path)
    for repo in manifest["repos"]:
        size = sum(f["bytes"] for f in repo["files"])
        print(f"{repo['repo_id']} ({repo['folder']}/, {len(repo['files'])} files, "
              f"{size / 2**20:.2f} MiB):")
        for f in repo["files"]:
            print(f"  {f['path']:<40} {f['bytes']:>12,d}  sha256 {f['sha256'][:12]}")
    for n in manifest["notes"]:
        print(f"  note: {n}")
    if p.dry_run:
        print(f"mens push: dry run — uploaded nothing; the files are in {out} "
              f"(manifest {out / MANIFEST})")
        return EXIT_OK
    from mens.push.hub import upload

    message = p.message or _message(rd, cfg)
    results = []
    for repo in manifest["repos"]:
        res = upload(out / repo["folder"], repo["repo_id"], repo_type=repo["repo_type"],
                     private=p.private, branch=p.branch, revision=p.revision, message=message,
                     description=_description(repo["folder"], rd))
        results.append(res)
        repo["result"] = res
        commit = (res.get("commit") or "")[:7]
        print(f"{res['repo_id']}: {len(res.get('files') or [])} files, "
              f"{len(res.get('changed') or [])} changed, commit {commit} → {res.get('url')}")
        # written after each repo: a push killed between repos shows which one arrived
        atomic_write(out / MANIFEST, json.dumps(manifest, indent=2))
    return EXIT_OK


def _message(rd, cfg) -> str:
    spec = rd.read_spec()
    lane = spec.get("lane") or {}
    return (f"mens push: {rd.path.name} — rung {(spec.get('rung') or {}).get('name')}, spoke "
            f"{(spec.get('spoke') or {}).get('name')}, lane {lane.get('method')}/"
            f"{lane.get('objective')}, {rd.read_summary().get('steps')} steps")


def _description(folder: str, rd) -> str:
    what = "the GGUFs and Modelfile" if folder == "gguf" else f"the {rd.artifact_kind} and its card"
    return f"Uploaded by `mens push` from run {rd.path.name}: {what}."
