"""`mens studio` / `python -m mens.studio [studio.port=P] [studio.host=H studio.token_env=VAR]`:
binds first (a taken port: exit 2 in a second), then serves the page and its API on uvicorn.

Bound to 127.0.0.1 by default. Any other bind needs a token: studio.token_env names the
environment variable that holds it (the value on the command line would be saved by Hydra into
.hydra/overrides.yaml), and an unset or empty one is exit 2 — nothing starts without it.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from omegaconf import DictConfig

from mens.errors import EXIT_OK, ConfigError

LOCAL = ("127.0.0.1", "localhost", "::1")


def token(st) -> str | None:
    """The token from the variable studio.token_env names; required beyond localhost."""
    if st.token_env and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", st.token_env):
        raise ConfigError(f"studio.token_env={st.token_env!r} must be the NAME of an environment "
                          f"variable (e.g. MENS_STUDIO_TOKEN), never the token itself.",
                          key="studio.token_env")
    value = os.environ.get(st.token_env, "") if st.token_env else ""
    if st.token_env and not value:
        raise ConfigError(f"studio.token_env={st.token_env} names a variable that is unset or "
                          f"empty: `export {st.token_env}=<a long random token>` first.",
                          key="studio.token_env")
    if st.host not in LOCAL and not value:
        raise ConfigError(f"studio.host={st.host} opens the studio beyond this machine, where "
                          f"anyone who reaches it could train and write files: set a token with "
                          f"`export MENS_STUDIO_TOKEN=<a long random token>` and "
                          f"`studio.token_env=MENS_STUDIO_TOKEN` (or keep studio.host=127.0.0.1).",
                          key="studio.token_env")
    return value or None


def task(cfg: DictConfig, out_dir: Path) -> int:
    import uvicorn

    from mens.serve.server import bind_socket
    from mens.studio.app import build_app

    st = cfg.studio
    key = token(st)
    try:
        sock = bind_socket(st.host, st.port)
    except ConfigError as e:   # bind_socket names serve.port; this is the studio's
        raise ConfigError(e.message.replace("serve.port", "studio.port"), key="studio.port")
    host, port = sock.getsockname()[:2]
    app = build_app(cfg, st.host, port, key)
    shown = "127.0.0.1" if host == "127.0.0.1" else (f"[{host}]" if ":" in host else host)
    print(f"mens: studio on http://{shown}:{port}/ (runs under {Path(st.runs).resolve()}; "
          f"Ctrl-C stops){' — token required' if key else ''}", flush=True)
    config = uvicorn.Config(app, lifespan="on", log_level="warning")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
    return EXIT_OK
