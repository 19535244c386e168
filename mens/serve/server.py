"""`python -m mens.serve [run=<run dir>] [serve.adapters=['name=<dir>', ...]]`: an
OpenAI-compatible server (FastAPI on uvicorn) over a base and its LoRA adapters as slots.

    python -m mens.serve run=outputs/2026-11-30/10-00-00_train     # base + that run's adapter
    MENS_KEY=… python -m mens.serve run=A serve.adapters=['b=B','C'] serve.api_key_env=MENS_KEY
    python -m mens.serve promote vox_lang [SLOT]    # on the running server: challenger → champion
    python -m mens.serve rollback vox_lang          # undo the last promotion
    python -m mens.serve aliases                    # show champion/challenger per spoke

`/v1/models` lists `base`, each adapter under its slot name (by default its run dir's name) and
the aliases `<spoke>:champion` / `<spoke>:challenger`. Binds 127.0.0.1:8089 by default;
`serve.port=0` takes a free port. The URL is printed and written to <run dir>/serve.json.
Requests may ask `n` choices (one batch), `logprobs`/`top_logprobs`, vLLM's `return_token_ids`
and batches of token-id prompts (mens.serve.batch); with `serve.runtime_lora=true` adapters
load and unload while serving on vLLM's /v1/load_lora_adapter, /v1/unload_lora_adapter
(mens.serve.lora_admin) — what a GRPO run with lane.grpo.generation=server uses.

A bearer key comes only from the environment: `serve.api_key_env` names the variable (the key
itself on the command line would be saved by Hydra into .hydra/overrides.yaml; mens.cli.serve
refuses `serve.api_key=`). Promotion needs a passing gate.json (`serve.require_gate`, see
mens.serve.slots); a refused one is exit 3.
"""
from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

from omegaconf import DictConfig

from mens.errors import EXIT_OK, ConfigError
from mens.serve.slots import PromotionRefused

ACTIONS = ("promote", "rollback", "aliases")


def task(cfg: DictConfig, out_dir: Path) -> int:
    s = cfg.serve
    key = api_key(s)
    if s.admin:
        return admin(s, key)
    import uvicorn

    from mens.run.rundir import RunDir
    from mens.serve.limits import h11_with_431
    from mens.serve.openai_api import build_app
    from mens.serve.slots import describe, load_from_config

    sock = bind_socket(s.host, s.port)
    slots = load_from_config(cfg)
    print(describe(slots))
    if not s.require_gate:
        print("mens: note: serve.require_gate=false: promotion does NOT check gate receipts; any "
              "adapter may become champion", file=sys.stderr)
    for note in slots.champion_notes():
        print(f"mens: note: {note}", file=sys.stderr)
    app = build_app(slots, key, s.max_body_bytes, s.max_tokens, s.max_header_bytes,
                    s.max_queue, s.runtime_lora, s.max_batch_tokens)
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    RunDir(out_dir).write_json("serve.json", {
        "url": url, "base_url": f"{url}/v1", "models": [m for m, _ in slots.model_ids()],
        "memory": slots.memory(), "require_gate": bool(s.require_gate),
        "champion_notes": slots.champion_notes()})
    print(f"mens: serving on {url}/v1 (Ctrl-C stops)", flush=True)
    config = uvicorn.Config(app, http=h11_with_431(), lifespan="off", log_level="warning",
                            h11_max_incomplete_event_size=s.max_header_bytes)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        slots.close()
        sock.close()
    return EXIT_OK


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before loading the model, so a taken port fails in a second with exit 2."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as e:
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}. Choose another "
                          f"with `serve.port=...` (0: any free port).", key="serve.port")
    sock.set_inheritable(True)
    return sock


def api_key(s) -> str | None:
    """The bearer key from the variable serve.api_key_env names (None: no key)."""
    if not s.api_key_env:
        return None
    key = os.environ.get(s.api_key_env, "")
    if not key:
        raise ConfigError(f"serve.api_key_env={s.api_key_env} names an environment variable that "
                          f"is unset or empty: `export {s.api_key_env}=<key>` first (or drop "
                          f"serve.api_key_env to serve without a key).", key="serve.api_key_env")
    return key


def admin(s, key: str | None = None) -> int:
    """Promote / roll back / list aliases on the server running at serve.host:serve.port."""
    import urllib.error
    import urllib.request

    if s.admin not in ACTIONS:
        raise ConfigError(f"serve.admin={s.admin}: use one of {', '.join(ACTIONS)}.",
                          key="serve.admin")
    if s.admin != "aliases" and not s.admin_spoke:
        raise ConfigError(f"`{s.admin}` needs a spoke: `python -m mens.serve {s.admin} SPOKE`.",
                          key="serve.admin_spoke")
    body = None
    if s.admin != "aliases":
        body = {"spoke": s.admin_spoke, **({"slot": s.admin_slot} if s.admin_slot else {})}
    url = f"http://{s.host}:{s.port}/admin/{s.admin}"
    req = urllib.request.Request(url, method="GET" if body is None else "POST",
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"content-type": "application/json",
                                          **({"authorization": f"Bearer {key}"}
                                             if key else {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            print(json.dumps(json.loads(r.read()), indent=2))
        return EXIT_OK
    except urllib.error.HTTPError as e:
        detail = json.loads(e.read() or b"{}").get("error", {}).get("message", e.reason)
        if e.code == 409:   # the gate refuses: exit 3, as every refusal
            raise PromotionRefused(f"{s.admin} refused by the server at {url}: {detail}") from None
        raise ConfigError(f"{s.admin} refused by the server at {url}: {detail}",
                          key="serve.admin") from None
    except OSError as e:
        raise ConfigError(f"no mens server answers at {url} ({e}): start one with `python -m "
                          f"mens.serve`, or point serve.host/serve.port at it.",
                          key="serve.port") from None
