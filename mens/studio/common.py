"""What the studio's route modules share: the planner behind Hydra's one global state, and the
JSON body every POST takes."""
from __future__ import annotations

import json
import threading

from fastapi import Request

from mens.studio.procs import Refused

compose_lock = threading.Lock()   # Hydra's global state: one composition at a time


def compose_plan(overrides: list[str]):
    from mens.config.compose import compose
    from mens.plan.spec import compile_run

    with compose_lock:
        cfg = compose(overrides)
        return cfg, *compile_run(cfg, "plan")


async def body(request: Request) -> dict:
    try:
        data = json.loads(await request.body() or b"{}")
    except ValueError:
        raise Refused(400, "the body must be JSON") from None
    if not isinstance(data, dict):
        raise Refused(400, "the body must be a JSON object")
    return data
