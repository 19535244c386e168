"""The Data panel's API: datasets under studio.datasets, their records (provenance, oracle
verdict, rating, tags) curated in place through mens.synth.curate, and their topic trees —
viewed here, pruned and expanded by `python -m mens.data tree …` children, the very command a
user would type. Expanding asks a teacher: with none configured (no candidate's key variable
set) the page is given the command to run instead."""
from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

from fastapi import Request
from omegaconf import OmegaConf

from mens.studio.common import body, compose_lock
from mens.studio.procs import Refused

NODE = re.compile(r"^[a-z0-9_/-]{1,200}$")


def teacher_configured(cfg) -> bool:
    """A candidate whose key variable is set here (local servers are not probed: a request
    from a page load would be a surprise; the command is shown for them instead)."""
    return any(c.get("api_key_env") and os.environ.get(c.api_key_env)
               for c in cfg.teacher.get("candidates") or [])


def tree_argv(d: Path, action: str, node: str) -> list[str]:
    import yaml
    spoke = (yaml.safe_load((d / "tree.yaml").read_text()) or {}).get("spoke")
    return ["-m", "mens.data", "tree", action, f"synth.out={d}", f"tree.node={node}",
            *([f"spoke={spoke}"] if spoke else [])]


def add_data(app, cfg, datasets: Path) -> None:
    @app.get("/api/data")
    def data_list():
        from mens.synth import dataset as ds
        return {"dir": str(datasets), "datasets": sorted(
            p.parent.name for p in datasets.glob(f"*/{ds.RECORDS}"))}

    def dataset(name) -> Path:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,80}", name) \
                or name in (".", "..") or not (datasets / name / "records.jsonl").is_file():
            raise Refused(404, f"no dataset `{str(name)[:80]}` under {datasets}")
        return datasets / name

    @app.get("/api/data/records")
    def data_records(name: str):
        import yaml

        from mens.data.formats import chat
        from mens.synth import dataset as ds
        d = dataset(name)
        tree = yaml.safe_load((d / ds.TREE).read_text()) if (d / ds.TREE).is_file() else None
        recs = [{"id": r.get("id"), "topic": r.get("topic"), "verdict": r.get("verdict"),
                 "rating": r.get("rating"), "tags": r.get("tags") or [],
                 "provenance": r.get("provenance") or r.get("origin"),
                 "prompt": next((m["content"] for m in chat(r)
                                 if m.get("role") == "user"), ""),
                 "answer": ds.answer(r)} for r in ds.read_jsonl(d / ds.RECORDS)[:500]]
        return {"name": name, "tree": tree, "records": recs}

    @app.post("/api/data/curate")
    async def data_curate(request: Request):
        from mens.config.compose import compose
        from mens.synth.curate import curate
        data = await body(request)
        d = dataset(data.get("name"))
        action, rid = data.get("action"), data.get("id")
        if action not in ("rate", "tag", "untag", "edit") or not isinstance(rid, str):
            raise Refused(400, "action: rate | tag | untag | edit, and the record's id")
        with compose_lock:
            c = compose([f"synth.out={d}"])
        OmegaConf.set_readonly(c, False)
        c.curate.id = rid
        if action == "rate":
            c.curate.rating = data.get("rating")
        elif action in ("tag", "untag"):
            c.curate.tags = [t for t in data.get("tags") or [] if isinstance(t, str)]
        else:
            c.curate.response = data.get("response")
        from mens.config.validate import validate
        validate(c)
        said: list[str] = []
        return {**await asyncio.to_thread(curate, c, action, said.append), "said": said}

    @app.post("/api/data/tree")
    async def data_tree(request: Request):
        data = await body(request)
        d = dataset(data.get("name"))
        action, node = data.get("action"), data.get("node")
        if action not in ("prune", "expand") or not isinstance(node, str) \
                or not NODE.match(node):
            raise Refused(400, "action: prune | expand, and node: a node id of tree.yaml")
        if not (d / "tree.yaml").is_file():
            raise Refused(404, f"{d} has no tree.yaml: `mens data tree expand synth.out={d}` "
                               f"starts one")
        argv = tree_argv(d, action, node)
        command = "mens data " + " ".join(argv[2:])
        if action == "expand" and not teacher_configured(cfg):
            return {"ran": False, "command": command,
                    "why": "no teacher is configured here (no candidate's key variable is "
                           "set): run the command where one is, e.g. with teacher=local"}
        r = await asyncio.to_thread(subprocess.run, [sys.executable, *argv], capture_output=True,
                                    text=True, timeout=900, stdin=subprocess.DEVNULL)
        if r.returncode:
            raise Refused(400 if r.returncode in (2, 3) else 500,
                          (r.stderr.strip() or r.stdout.strip())[-2000:])
        return {"ran": True, "command": command, "said": r.stdout.strip()[-2000:]}
