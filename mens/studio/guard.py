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


WILDCARDS = ("0.0.0.0", "::", "")


def interface_addresses() -> set[str]:
    """Every address of this machine's network interfaces (psutil), IPv6 ones bracketed and
    without a zone: the names a browser elsewhere puts in Host when it opens the studio by IP."""
    import psutil

    out = set()
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET:
                out.add(a.address)
            elif a.family == socket.AF_INET6:
                out.add(f"[{a.address.split('%')[0]}]")
    return out


def allowed_hosts(host: str, port: int, extra=()) -> set[str]:
    """The Host header values this studio answers to (name:port, lower case): the loopback
    names; beyond localhost its own names and every address it is bound to — each interface's
    address for a wildcard bind (0.0.0.0, ::) — plus `studio.allowed_hosts` (a name, or
    name:port for a proxy that forwards another port)."""
    names = set(LOCAL_NAMES)
    if host not in ("127.0.0.1", "localhost", "::1"):
        # bound beyond localhost (token required): its own names and the bound addresses
        names |= {socket.gethostname(), socket.getfqdn()}
        names |= interface_addresses() if host in WILDCARDS else \
            {host if ":" not in host else f"[{host}]"}
    out = {f"{n}:{port}".lower() for n in names if n and n not in ("0.0.0.0", "[::]")}
    for e in extra or ():
        e = str(e).strip().lower()
        out.add(e if e.rpartition(":")[2].isdigit() and not e.endswith("]") else f"{e}:{port}")
    return out


class Guard:
    """token_first: check the token before Host and Origin (a bind beyond localhost): a caller
    without it learns nothing, not even which names the studio answers to."""
    def __init__(self, app, hosts: set[str], token: str | None, max_body: int,
                 token_first: bool = False):
        self.app, self.hosts, self.token, self.max_body = app, hosts, token, max_body
        self.token_first = bool(token) and token_first

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        h = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        set_cookie, refused = None, None
        if self.token_first:
            set_cookie, refused = self.check_token(scope, h)
        refused = refused or self.check_host(h)
        if not self.token_first and not refused and self.token:
            set_cookie, refused = self.check_token(scope, h)
        if refused:
            return await deny(send, *refused)
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


    def check_host(self, h: dict) -> tuple[int, str] | None:
        """403 for a foreign Host (DNS rebinding) or a cross-site request; else None."""
        host = h.get("host", "").lower()
        if host not in self.hosts:
            return 403, (f"Host `{host}` is not this studio's (DNS rebinding guard): open it as "
                         f"http://{sorted(self.hosts)[0]}/, or add the name to "
                         f"studio.allowed_hosts")
        origin = h.get("origin")
        if origin is not None and origin.lower().rstrip("/") not in \
                {f"http://{x}" for x in self.hosts}:
            return 403, f"cross-origin request from `{origin}` refused"
        if h.get("sec-fetch-site") == "cross-site":
            return 403, "cross-site request refused"
        return None

    def check_token(self, scope, h: dict) -> tuple[str | None, tuple[int, str] | None]:
        """(the token to set as a cookie, or None; 401 when no valid token came)."""
        set_cookie = None
        given = _bearer(h.get("authorization", "")) or _cookie(h.get("cookie", ""), COOKIE)
        if scope["path"] == "/" and not given:
            given = (parse_qs(scope.get("query_string", b"").decode()).get("token") or
                     [None])[0]
            set_cookie = given
        if not given or not hmac.compare_digest(given.encode(), self.token.encode()):
            return None, (401, "a valid studio token is required (the value of the variable "
                               "studio.token_env names)")
        return set_cookie, None


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
