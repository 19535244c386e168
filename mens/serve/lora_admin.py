"""Adapters loaded and unloaded while serving, on the routes vLLM names them (issue #39):

    POST /v1/load_lora_adapter    {"lora_name": "step-3", "lora_path": "/runs/x/step-3"}
    POST /v1/unload_lora_adapter  {"lora_name": "step-2"}

A loaded adapter is one more slot (mens.serve.slots.Slots.add: PEFT `load_adapter` onto the one
PeftModel) whose name clients send as `model`; unloading deletes its A/B matrices (PEFT
`delete_adapter`; the last one leaves the bare base, `unload`). Both run on the model thread, so
no request ever sees a half-loaded adapter: one queued before the load answers from the old
weights, one after from the new. This is how a GRPO run generating through the server
(mens.objective.rollout_server) syncs its policy after each optimizer step.

vLLM serves these routes only when VLLM_ALLOW_RUNTIME_LORA_UPDATING=True is in its environment
(they make the server read any path it is given). mens gates them by config instead —
`serve.runtime_lora=true`, recorded in the run's config — and behind the server's bearer key
when `serve.api_key_env` sets one; off (the default) they answer 403 naming the key. An adapter
that is a spoke's champion or challenger is not unloaded (400: promote or roll back first).
"""
from __future__ import annotations

import asyncio
import time

from fastapi import Depends

from mens.errors import ConfigError
from mens.serve.api_error import APIError
from mens.serve.requests import LoadLoraRequest, UnloadLoraRequest, unsupported, \
    unsupported_message
from mens.serve.slots import BASE, Source


def unload(slots, name: str) -> None:
    """Drop slot `name` and its weights (model thread)."""
    slot = slots.slots.pop(name)
    rest = [s.adapter for s in slots.slots.values() if s.adapter]
    if rest:
        slots.model.set_adapter(rest[0])     # not the one going: PEFT would warn and pick one
        slots.model.delete_adapter(slot.adapter)
    else:   # the last adapter: back to the plain base (a PeftModel with none would not run)
        slots.model = slots.model.unload()


def add_routes(app, slots, auth, enabled: bool) -> None:
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
    async def load(req: LoadLoraRequest):
        check(req)
        if req.lora_name in slots.slots:
            raise APIError(400, f"The lora adapter '{req.lora_name}' has already been loaded: "
                                f"unload it first, or load under another name.", "lora_name")
        try:
            src = Source.parse(f"{req.lora_name}={req.lora_path}", key="lora_path")
        except ConfigError as e:
            raise APIError(400, e.message, "lora_path")
        t0 = time.perf_counter()
        try:
            await asyncio.wrap_future(slots.run(slots.add, src))
        except ConfigError as e:   # wrong base, wrong shapes, unreadable files
            raise APIError(400, e.message, "lora_path")
        return {"object": "lora_adapter", "lora_name": req.lora_name, "status": "loaded",
                "seconds": round(time.perf_counter() - t0, 6)}

    @app.post("/v1/unload_lora_adapter", dependencies=[Depends(auth)])
    async def unload_route(req: UnloadLoraRequest):
        check(req)
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
        await asyncio.wrap_future(slots.run(unload, slots, req.lora_name))
        return {"object": "lora_adapter", "lora_name": req.lora_name, "status": "unloaded",
                "seconds": round(time.perf_counter() - t0, 6)}
