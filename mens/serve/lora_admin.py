"""Adapters loaded and unloaded while serving, on the routes vLLM names them (issue #39):

    POST /v1/load_lora_adapter    {"lora_name": "step-3", "lora_path": "/runs/x/step-3"}
    POST /v1/unload_lora_adapter  {"lora_name": "step-2"}

A loaded adapter is one more slot (mens.serve.slots.Slots.add: PEFT `load_adapter` onto the one
PeftModel) whose name clients send as `model`; unloading deletes its A/B matrices (PEFT
`delete_adapter`; the last one leaves the bare base, `unload`). Both run on the model thread —
reading the path included, so a slow disk never stalls the event loop (/health, other routes
answer meanwhile; issue #49) — and no request ever sees a half-loaded adapter: one queued before
the load answers from the old weights, one after from the new. A request for an adapter that is
unloaded while it waits is answered 404 `model_not_found` (Slots.activate), never a 500 nor
another adapter's weights. This is how a GRPO run generating through the server
(mens.objective.rollout_server) syncs its policy after each optimizer step.

`lora_path` is a local directory the server reads — an adapter dir, or a run dir holding
adapter/ — never a Hub id: the route downloads nothing (a 400 says so; a Hub adapter is served
from the start with `serve.adapters=['name=org/name']`, or fetched first). `lora_name` is a
model id: letters, digits, `.`, `_`, `-`, at most 64, not `base`, not loaded already.

vLLM serves these routes only when VLLM_ALLOW_RUNTIME_LORA_UPDATING=True is in its environment
(they make the server read any path it is given). mens gates them by config instead —
`serve.runtime_lora=true`, recorded in the run's config — and behind the server's bearer key
when `serve.api_key_env` sets one (a server a GRPO run starts always has one: a random key it
hands over in the environment); off (the default) they answer 403 naming the key. An adapter
that is a spoke's champion or challenger is not unloaded (400: promote or roll back first).
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

from fastapi import Depends

from mens.errors import ConfigError
from mens.serve.api_error import APIError
from mens.serve.requests import LoadLoraRequest, UnloadLoraRequest, unsupported, \
    unsupported_message
from mens.serve.slots import BASE, NAME_RE, Source


def unload(slots, name: str) -> None:
    """Drop slot `name` and its weights (model thread)."""
    slot = slots.slots.pop(name)
    rest = [s.adapter for s in slots.slots.values() if s.adapter]
    if rest:
        slots.model.set_adapter(rest[0])     # not the one going: PEFT would warn and pick one
        slots.model.delete_adapter(slot.adapter)
    else:   # the last adapter: back to the plain base (a PeftModel with none would not run)
        slots.model = slots.model.unload()


def load(slots, name: str, path: str):
    """Read and load the adapter at `path` as slot `name` (model thread: the stat, the spec
    read and the weights all happen here, never on the event loop)."""
    p = Path(path).expanduser()
    if not p.is_dir():
        hub = "/" in path and not path.startswith((".", "/", "~"))
        raise APIError(400, f"lora_path `{path[:300]}` is not a local directory on this server"
                            f"{' (it reads as a Hub repo id)' if hub else ''}: the runtime "
                            f"route loads only a local directory the server can read (an "
                            f"adapter dir, or a run dir holding adapter/), and downloads "
                            f"nothing. Fetch a Hub adapter first, or serve it from the start "
                            f"with `serve.adapters=['{name}=ORG/NAME']`.", "lora_path")
    if name in slots.slots:   # loaded meanwhile by a request queued before this one
        raise _taken(name)
    try:
        return slots.add(Source.parse(f"{name}={p}", key="lora_path"))
    except ConfigError as e:   # no adapter there, wrong base, wrong shapes, unreadable files
        raise APIError(400, e.message, "lora_path") from None
    except OSError as e:       # e.g. a spec.yaml the server may not read
        raise APIError(400, f"lora_path `{path[:300]}`: {e}", "lora_path") from None


def _taken(name: str) -> APIError:
    return APIError(400, f"The lora adapter '{name}' has already been loaded: unload it first, "
                         f"or load under another name.", "lora_name")


def check_name(slots, name: str) -> None:
    """A name clients can send as `model` (the slot names' rule, Source.parse's)."""
    if name == BASE or name in slots.slots:
        raise _taken(name) if name != BASE else APIError(
            400, "lora_name `base` is the base model's id: name the adapter otherwise.",
            "lora_name")
    if not NAME_RE.match(name):
        raise APIError(400, f"lora_name `{name[:100]}` is not usable as a model id: give 1 to 64 "
                            f"letters, digits, `.`, `_` or `-`, starting with a letter or digit "
                            f"(e.g. `step-3`).", "lora_name")


def add_routes(app, slots, auth, enabled: bool) -> None:
    leaving: set[str] = set()   # names whose unload is queued on the model thread (event loop)

    def check(req) -> None:
        found = unsupported(req)
        if found:
            raise APIError(400, unsupported_message(req, found), found[0][0],
                           "unsupported_parameter")
        if not enabled:
            raise APIError(403, "Loading and unloading adapters at runtime is off on this server: "
                                "start it with `serve.runtime_lora=true` (vLLM's "
                                "VLLM_ALLOW_RUNTIME_LORA_UPDATING).", None, "runtime_lora_disabled")

    @app.post("/v1/load_lora_adapter", dependencies=[Depends(auth)])
    async def load_route(req: LoadLoraRequest):
        check(req)
        check_name(slots, req.lora_name)
        t0 = time.perf_counter()
        await asyncio.wrap_future(slots.run(load, slots, req.lora_name, req.lora_path))
        return {"object": "lora_adapter", "lora_name": req.lora_name, "status": "loaded",
                "seconds": round(time.perf_counter() - t0, 6)}

    @app.post("/v1/unload_lora_adapter", dependencies=[Depends(auth)])
    async def unload_route(req: UnloadLoraRequest):
        check(req)
        if req.lora_name in leaving:
            raise APIError(409, f"The lora adapter '{req.lora_name}' is being unloaded already.",
                           "lora_name", "unload_in_progress")
        slot = slots.slots.get(req.lora_name)
        if slot is None or req.lora_name == BASE:
            raise APIError(404, f"The lora adapter '{req.lora_name}' is not loaded.",
                           "lora_name", "not_found")
        roles = [f"{sp}:{r}" for sp, rs in slots.aliases.items() for r, n in rs.items()
                 if n == req.lora_name]
        if roles:
            raise APIError(400, f"'{req.lora_name}' is {', '.join(roles)}: promote another "
                                f"adapter or roll back before unloading it.", "lora_name")
        t0 = time.perf_counter()
        leaving.add(req.lora_name)
        try:
            await asyncio.wrap_future(slots.run(unload, slots, req.lora_name))
        finally:
            leaving.discard(req.lora_name)
        return {"object": "lora_adapter", "lora_name": req.lora_name, "status": "unloaded",
                "seconds": round(time.perf_counter() - t0, 6)}
