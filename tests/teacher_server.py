"""A real OpenAI-compatible HTTP server on 127.0.0.1 that replays teacher answers from a fixture.

    with replay_server("tests/synth/teacher/fixtures/replies.json", api_key="k") as srv:
        client = OpenAI(base_url=srv.base_url, api_key="k")
        ...
        srv.requests        # every request received: {"path", "model", "body", "authorized"}

http.server (ThreadingHTTPServer) in a daemon thread: no dependency, starts in milliseconds.
`POST /v1/chat/completions` and `GET /v1/models`; every request without `Authorization: Bearer
<api_key>` gets 401 in OpenAI's shape (when the server has a key). The Authorization header is
never recorded.

A fixture is a JSON list of scripts (or {"scripts": [...]}), each:

    {"model": "good",                  # the request's model ("*": any)
     "match": "leaf: loops",           # optional: a substring of the request's messages
     "reject_response_format": false,  # true: 400 naming response_format when the request has it
     "delay_s": 0,                     # seconds each answer takes (in_flight / max_in_flight)
     "replies": [REPLY, ...]}          # consumed in order; the last one repeats

The first script whose model and match fit answers. A REPLY is {"json": OBJ} (the content is
OBJ as JSON text), {"content": "TEXT"} (sent as is: malformed JSON, prose, a fenced block), or
{"status": 429 | 500 | ..., "error": "message"} (an error in OpenAI's shape; "retry_after" adds
the header); "usage" may set {"prompt_tokens", "completion_tokens"} (default: word counts) and
"finish_reason" the reason (default "stop"). A model no script names gets 404 model_not_found.
"""
from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class ReplayServer:
    def __init__(self, scripts: list[dict], api_key: str | None = None):
        self.scripts = scripts
        self.api_key = api_key
        self.requests: list[dict] = []
        self.in_flight = self.max_in_flight = 0     # chat requests being answered at once
        self._next = [0] * len(scripts)
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def answer(self, path: str, headers, body: dict | None) -> tuple[int, dict, dict]:
        """(status, JSON body, extra headers) for one request; records it."""
        authorized = self.api_key is None or \
            headers.get("Authorization") == f"Bearer {self.api_key}"
        with self._lock:
            self.requests.append({"path": path, "model": (body or {}).get("model"),
                                  "body": body, "authorized": authorized})
        if not authorized:
            return 401, _error("Incorrect API key provided.", "invalid_api_key",
                               "invalid_request_error"), {}
        if path.rstrip("/") == "/v1/models":
            models = sorted({s["model"] for s in self.scripts if s["model"] != "*"})
            return 200, {"object": "list", "data": [{"id": m, "object": "model",
                                                     "owned_by": "replay"} for m in models]}, {}
        if path.rstrip("/") != "/v1/chat/completions" or body is None:
            return 404, _error(f"no route {path}", "not_found", "invalid_request_error"), {}
        model, text = body.get("model"), json.dumps(body.get("messages", []))
        for i, script in enumerate(self.scripts):
            if script["model"] not in ("*", model) or script.get("match", "") not in text:
                continue
            if script.get("reject_response_format") and body.get("response_format"):
                return 400, _error("Unrecognized request argument supplied: response_format",
                                   "unsupported_parameter", "invalid_request_error",
                                   param="response_format"), {}
            with self._lock:
                n = self._next[i]
                self._next[i] = n + 1
            reply = script["replies"][min(n, len(script["replies"]) - 1)]
            with self._lock:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                time.sleep(script.get("delay_s", 0))
            finally:
                with self._lock:
                    self.in_flight -= 1
            return _reply(model, reply, text)
        return 404, _error(f"The model `{model}` does not exist or you do not have access to "
                           f"it.", "model_not_found", "invalid_request_error"), {}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _reply(model: str, reply: dict, prompt_text: str) -> tuple[int, dict, dict]:
    status = reply.get("status", 200)
    if status != 200:
        headers = {"Retry-After": str(reply["retry_after"])} if "retry_after" in reply else {}
        return status, _error(reply.get("error", "error"), None, "server_error"), headers
    content = json.dumps(reply["json"]) if "json" in reply else reply["content"]
    usage = reply.get("usage") or {"prompt_tokens": len(prompt_text.split()),
                                   "completion_tokens": len(content.split())}
    usage = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
    return 200, {"id": "chatcmpl-replay", "object": "chat.completion", "created": 0,
                 "model": model, "usage": usage,
                 "choices": [{"index": 0, "finish_reason": reply.get("finish_reason", "stop"),
                              "message": {"role": "assistant", "content": content}}]}, {}


def _error(message: str, code, type_: str, param=None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _handler(server: ReplayServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, payload: dict, headers: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send(*server.answer(self.path, self.headers, None))

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._send(400, _error("body is not JSON", None, "invalid_request_error"), {})
                return
            self._send(*server.answer(self.path, self.headers, body))

        def log_message(self, *args):     # quiet: the tests read srv.requests instead
            pass

    return Handler


def load_scripts(fixture) -> list[dict]:
    if isinstance(fixture, (str, Path)):
        fixture = json.loads(Path(fixture).read_text())
    return fixture["scripts"] if isinstance(fixture, dict) else fixture


@contextmanager
def replay_server(fixture, api_key: str | None = None):
    """A running ReplayServer for a fixture file (or a list of scripts); stopped at the end."""
    srv = ReplayServer(load_scripts(fixture), api_key)
    thread = threading.Thread(target=srv.httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.close()
        thread.join(timeout=5)
