"""The studio's HTTP API (FastAPI) and its page. Every control calls the real thing: the planner
in process (compose + compile_run: torch-free, ~0.1 s), the ladder (mens.ladder.state), gate
receipts (mens.run.receipt), curation (mens.synth.curate); training, gating, the AFK queue and
serving as `python -m mens…` children (mens.studio.procs, mens.studio.serving).

    build_app(cfg, host, port, token) -> ASGI app (FastAPI wrapped in mens.studio.guard.Guard)
"""
from __future__ import annotations

import asyncio
import re
from functools import lru_cache
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from omegaconf import DictConfig

from mens.errors import MensError
from mens.studio.common import body, compose_lock as _compose_lock, compose_plan
from mens.studio.guard import Guard, allowed_hosts
from mens.studio.hubs import add_hubs
from mens.studio.data import add_data
from mens.studio.jobs import add_jobs
from mens.studio.procs import Procs, Refused, check_overrides, rel, run_dir
from mens.studio.serving import Serving

STATIC = Path(__file__).parent / "static"
RECIPE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
GROUPS = ("hw", "rung", "spoke", "data", "lane", "curriculum", "logger")


def build_app(cfg: DictConfig, host: str, port: int, token: str | None = None):
    st = cfg.studio
    root = Path(st.runs).resolve()
    root.mkdir(parents=True, exist_ok=True)
    procs = Procs(root)
    serving = Serving(root, procs)
    app = FastAPI(title="mens studio", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.procs = procs

    @app.exception_handler(Refused)
    async def _refused(request, e: Refused):
        return JSONResponse({"error": e.message}, status_code=e.status)

    @app.exception_handler(MensError)
    async def _mens(request, e: MensError):   # a bad override, a refused plan: the user's to fix
        return JSONResponse({"error": e.message, "exit_code": e.code}, status_code=400)

    @app.get("/")
    async def index():
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})

    @app.get("/static/{name:path}")
    async def static(name: str):
        p = (STATIC / name).resolve()
        if STATIC.resolve() not in p.parents or not p.is_file():
            raise Refused(404, "no such file")
        return FileResponse(p)

    # --- topology ----------------------------------------------------------------------------
    @app.get("/api/ladder")
    def ladder_view(rungs: str | None = None):
        from mens.ladder.state import ladder
        from mens.plan.spec import LADDER

        wanted = [r for r in (rungs or "").split(",") if r] or None
        if wanted and any(r not in LADDER for r in wanted):
            raise Refused(400, f"rungs: some of {', '.join(LADDER)}")
        c = cfg.copy()
        c.ladder.runs = str(root)
        with _compose_lock:
            result = ladder(c, rungs=wanted)
        for cell in result["cells"]:
            if cell.get("run"):
                cell["run"] = rel(root, Path(cell["run"]))
        return {**result, "runs_root": str(root)}

    @app.post("/api/afk")
    async def afk(request: Request):
        data = await body(request)
        cells = data.get("cells")
        if not isinstance(cells, list) or not cells or not all(
                isinstance(c, str) and re.fullmatch(r"[a-z0-9_.]+/[a-z0-9_]+", c) for c in cells):
            raise Refused(400, "cells: a list of `rung/spoke`")
        over = check_overrides(data.get("overrides", []))
        afk_dir = root / "afk"
        if procs.alive("afk"):
            raise Refused(409, "an AFK queue started here is running: it takes new cells "
                               "when it is run again")
        argv = ["-m", "mens.afk", f"afk.dir={afk_dir}", f"afk.cells=[{','.join(cells)}]"]
        if over:
            argv.append("afk.overrides=[" + ",".join(f"'{o}'" for o in over) + "]")
        procs.spawn("afk", argv, afk_dir, key="afk")
        return {"queued": cells, "dir": str(afk_dir)}

    @app.get("/api/afk")
    def afk_status():
        from mens.afk.queue import Queue
        q = Queue(root / "afk")
        return {"running": procs.alive("afk"), "state": q.data.get("state"),
                "items": [{k: i.get(k) for k in ("id", "cell", "state", "attempts", "reason")}
                          for i in q.items]}

    # --- recipe ------------------------------------------------------------------------------
    @app.post("/api/plan")
    async def plan(request: Request):
        from mens.config.objectives import lane_fields

        over = check_overrides((await body(request)).get("overrides", []))
        _, spec, p = await asyncio.to_thread(compose_plan, over)
        return {**lane_fields(spec.lane),   # lane (its label), method, objective
                "verdict": p.verdict, "fits": p.fits, "peak_bytes": p.peak_bytes,
                "budget_bytes": p.budget_bytes, "components": p.components, "cell": p.cell,
                "micro_batch": p.shape.micro_batch, "seq_len": spec.train.seq_len,
                "grad_accum": p.grad_accum, "global_batch": p.global_batch,
                "calibrated": p.calibrated, "ways_out": list(p.ways_out),
                "hw": spec.hw.name, "rung": spec.rung.name, "notes": list(spec.notes)}

    @app.post("/api/recipes")
    async def save_recipe(request: Request):
        from mens.run.rundir import atomic_write
        data = await body(request)
        name = data.get("name")
        if not isinstance(name, str) or not RECIPE_NAME.match(name):
            raise Refused(400, "name: lower case letters, digits and _ (e.g. my_tiny_run)")
        over = check_overrides(data.get("overrides", []))
        await asyncio.to_thread(compose_plan, over)   # it must compose before it is saved
        path = Path(st.recipes).resolve() / f"{name}.yaml"
        if path.exists():
            raise Refused(409, f"{path} exists: choose another name")
        atomic_write(path, recipe_yaml(name, over))
        return {"path": str(path), "use": f"python -m mens +recipe={name}"}

    add_jobs(app, root, procs, gate_overrides(cfg))

    add_hubs(app, cfg, root)
    add_data(app, cfg, Path(st.datasets).resolve())

    # --- serve -------------------------------------------------------------------------------
    @app.get("/api/serve")
    def serve_status():
        return serving.status()

    @app.post("/api/serve/start")
    async def serve_start(request: Request):
        ids = (await body(request)).get("runs")
        if not isinstance(ids, list) or len(ids) > 8:
            raise Refused(400, "runs: a list of run ids")
        return serving.start([run_dir(root, i) for i in ids])

    @app.post("/api/serve/stop")
    def serve_stop():
        return serving.stop()

    @app.post("/api/serve/{action}")
    async def serve_admin(action: str, request: Request):
        if action in ("chat", "turn"):   # turn: a conversation continued (tool results)
            return await asyncio.to_thread(getattr(serving, action), await body(request))
        code, out = await asyncio.to_thread(serving.admin, action, await body(request))
        return JSONResponse(out, status_code=code)

    @app.get("/api/serve/prompts")
    def prompts(spoke: str):
        from mens.config.options import load_option, spokes
        from mens.data.corpus import load_eval
        from mens.data.formats import kind
        if spoke not in spokes():
            raise Refused(404, f"no spoke `{spoke[:40]}`")
        recs = [r for r in load_eval(load_option("spoke", spoke)) if kind(r) == "chat"][:5]
        return {"prompts": [next(m["content"] for m in r["messages"] if m["role"] == "user")
                            for r in recs]}

    @app.get("/api/options")
    def options():
        from mens.config.options import spokes
        from mens.resources import CONF_DIR
        return {g: sorted(p.stem for p in (CONF_DIR / g).glob("*.yaml")) for g in GROUPS} | {
            "spoke": spokes(), **lane_choices()}

    app.router.on_shutdown.append(procs.stop_all)
    local = host in ("127.0.0.1", "localhost", "::1")
    return Guard(app, allowed_hosts(host, port, st.allowed_hosts), token, st.max_body_bytes,
                 token_first=not local)


@lru_cache(maxsize=1)
def lane_choices() -> dict:
    """The Recipe's two lane selects, from the lane option files and the objectives' cards
    (mens.config.objectives): `method` and `objective` (the names); `methods` [{name, option}]
    (SFT on a method: `lane=<option>`); `objectives` [{name, option, method, record, wants,
    reference, hint}] (`lane=<option>`, plus `lane.method=M` when M is not the option's own
    method; sft has no option: the method's file). `reference` is the option file's own
    answer (grpo: its grpo.beta > 0)."""
    from mens.config.objectives import CARDS, WANT
    from mens.config.options import load_option
    from mens.config.schema import METHODS
    from mens.resources import option_names

    files = {n: _lane_keys(n) for n in option_names("lane")}
    methods = []
    for m in METHODS:   # its own file (lora.yaml), else the first SFT file of that method
        ok = [n for n, k in files.items() if k.get("method") == m
              and k.get("objective", "sft") == "sft"]
        methods.append({"name": m, "option": m if m in ok else next(iter(ok), None)})
    objectives = []
    for name, c in CARDS.items():
        option = name if name != "sft" and files.get(name, {}).get("objective") == name \
            else None
        reference = c.needs_reference(load_option("lane", option)) if option else \
            c.reference == "always"
        wants = WANT[c.record] + (f" (also from {' or '.join(c.accepts)} records)"
                                  if c.accepts else "")
        if "oracle_procs" in c.memory_terms:
            wants += ", rewarded by the spoke's oracle"
        if "chat" not in c.record_kinds():
            wants += ": a spoke with preference pairs, or data of that kind"
        ref = {"none": "no reference model",
               "always": "a frozen reference model (log-probs computed once)",
               "when_beta": f"a reference model in the step while {name}.beta > 0 "
                            f"({'on' if reference else 'off'} by default)"}[c.reference]
        objectives.append({"name": name, "option": option,
                           "method": files[option].get("method") if option else None,
                           "record": c.record, "wants": WANT[c.record], "reference": reference,
                           "hint": f"{name}: {wants} · {ref}"})
    return {"method": list(METHODS), "objective": list(CARDS), "methods": methods,
            "objectives": objectives}


def _lane_keys(name: str) -> dict:
    """A lane option file's method and objective, its defaults list's files first (dpo.yaml:
    `defaults: [lora, _self_]` + `objective: dpo` → method lora, objective dpo)."""
    import yaml

    from mens.resources import option_path

    raw = yaml.safe_load(option_path("lane", name).read_text()) or {}
    keys = {}
    for d in raw.get("defaults") or []:
        if isinstance(d, str) and d != "_self_" and d != name:
            keys |= _lane_keys(d)
    return keys | {k: raw[k] for k in ("method", "objective") if k in raw}


def recipe_yaml(name: str, overrides: list[str]) -> str:
    """Overrides as a recipe file: group choices in the defaults list, knobs as nested keys."""
    import yaml

    defaults, knobs = [], {}
    for o in overrides:
        key, _, value = o.partition("=")
        plain = key.lstrip("+")
        if plain in GROUPS:
            defaults.append({f"/{plain}": value} if key.startswith("+")
                            else {f"override /{plain}": value})
            continue
        node = knobs
        *parents, leaf = plain.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value) if value else None
    head = (f"# @package _global_\n# saved by mens studio: python -m mens +recipe={name}\n")
    body = {"defaults": defaults, **knobs} if defaults else knobs
    return head + yaml.safe_dump(body, sort_keys=False)


def gate_overrides(cfg) -> list[str]:
    """The studio's own `gate.*` settings that differ from the defaults, as overrides for the
    gates it launches (`mens studio gate.max_prompts=16` gates on 16 prompts per spoke), and its
    `eval.min_items` — the floor below which the gate judges nothing is part of its verdict."""
    from omegaconf import OmegaConf

    from mens.config.schema import EvalConfig, GateConfig

    default = OmegaConf.to_container(OmegaConf.structured(GateConfig))
    out = []
    for key, value in OmegaConf.to_container(cfg.gate).items():
        if value != default.get(key):
            shown = f"[{','.join(map(str, value))}]" if isinstance(value, list) else value
            out.append(f"gate.{key}={shown}")
    if int(cfg.eval.min_items) != EvalConfig.min_items:
        out.append(f"eval.min_items={int(cfg.eval.min_items)}")
    return out

