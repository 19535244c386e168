"""The studio's front door: an ASGI middleware every request passes before any route runs.

A local web app that starts training and writes files is a target for two browser attacks:
a foreign page posting to 127.0.0.1 (cross-site requests: a foreign `Origin`, or
`Sec-Fetch-Site: cross-site`) and DNS rebinding (a foreign name that resolves to 127.0.0.1: the
`Host` header says the name). Both get 403 here. Bodies are read whole, up to max_body_bytes,
before the app sees them (a larger one: 413), so a rejected request changes nothing on disk.
With a token (studio.token_env; required for any bind beyond localhost) every request carries it:
`Authorization: Bearer …`, or the cookie the page gets from one visit to `/?token=…`.
"""
from __future__ import annotations

import hmac
import json
import socket
from urllib.parse import parse_qs

LOCAL_NAMES = ("127.0.0.1", "localhost", "[::1]")
COOKIE = "mens_studio_token"


def allowed_hosts(host: str, port: int) -> set[str]:
    """The Host header values this studio answers to (name:port, lower case)."""
    names = set(LOCAL_NAMES)
    if host not in ("127.0.0.1", "localhost", "::1"):
        # bound beyond localhost (token required): its own names and the bind address
        names |= {host if ":" not in host else f"[{host}]", socket.gethostname(),
                  socket.getfqdn()}
    return {f"{n}:{port}".lower() for n in names if n and n not in ("0.0.0.0", "[::]")}


class Guard:
    def __init__(self, app, hosts: set[str], token: str | None, max_body: int):
        self.app, self.hosts, self.token, self.max_body = app, hosts, token, max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        h = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = h.get("host", "").lower()
        if host not in self.hosts:
            return await deny(send, 403, f"Host `{host}` is not this studio's (DNS rebinding "
                                         f"guard): open it as http://{sorted(self.hosts)[0]}/")
        origin = h.get("origin")
        if origin is not None and origin.lower().rstrip("/") not in \
                {f"http://{x}" for x in self.hosts}:
            return await deny(send, 403, f"cross-origin request from `{origin}` refused")
        if h.get("sec-fetch-site") == "cross-site":
            return await deny(send, 403, "cross-site request refused")
        set_cookie = None
        if self.token:
            given = _bearer(h.get("authorization", "")) or _cookie(h.get("cookie", ""), COOKIE)
            if scope["path"] == "/" and not given:
                given = (parse_qs(scope.get("query_string", b"").decode()).get("token") or
                         [None])[0]
                set_cookie = given
            if not given or not hmac.compare_digest(given.encode(), self.token.encode()):
                return await deny(send, 401, "a valid studio token is required (the value of "
                                             "the variable studio.token_env names)")
        try:
            length = int(h.get("content-length") or 0)
        except ValueError:
            return await deny(send, 400, "bad Content-Length")
        if length > self.max_body:
            return await deny(send, 413, f"request body over studio.max_body_bytes="
                                         f"{self.max_body}")
        body, more = b"", True
        while more:   # read it all now: a chunked body past the limit is refused just the same
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
            if len(body) > self.max_body:
                return await deny(send, 413, f"request body over studio.max_body_bytes="
                                             f"{self.max_body}")
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()   # afterwards: the disconnect, for streaming responses

        async def send_cookie(msg):
            if set_cookie and msg["type"] == "http.response.start":
                msg = dict(msg)
                msg["headers"] = list(msg.get("headers", [])) + [
                    (b"set-cookie", f"{COOKIE}={set_cookie}; HttpOnly; SameSite=Strict; "
                                    f"Path=/".encode())]
            await send(msg)

        return await self.app(scope, replay, send_cookie)


def _bearer(value: str) -> str | None:
    scheme, _, tok = value.partition(" ")
    return tok.strip() if scheme.lower() == "bearer" and tok.strip() else None


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        k, _, v = part.strip().partition("=")
        if k == name and v:
            return v
    return None


async def deny(send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
