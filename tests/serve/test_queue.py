"""A bounded queue (issue #25, `serve.max_queue`): a burst of 200 concurrent requests against
max_queue=8 gets only 200s and 503s — the 503s at once, in OpenAI's error shape with
Retry-After — and /health says the queue's depth. The real app over real Slots (the tiny base +
the tiny run's adapter), served by uvicorn on 127.0.0.1 in this process."""
from __future__ import annotations

import asyncio
import collections
import json

import httpx
import pytest

from mens.serve.admission import Admission, QueueFull
from serve_util import serving


def test_admission_counts_one_running_and_max_queue_waiting():
    a = Admission(2)
    places = [a.enter() for _ in range(3)]             # one running + two waiting
    assert a.state() == {"depth": 2, "in_flight": 3, "max_queue": 2}
    with pytest.raises(QueueFull) as e:
        a.enter()
    assert e.value.retry_after >= 1 and "serve.max_queue=2" in str(e.value)
    places[0].release()
    places[0].release()                                # given back once, however many ends
    assert a.state()["in_flight"] == 2
    a.enter()                                          # a place came free
    assert a.state()["in_flight"] == 3


@pytest.fixture(scope="module")
def app(tiny_run):
    from mens.run.rundir import RunDir
    from mens.serve.openai_api import build_app
    from mens.serve.slots import Slots, Source

    slots = Slots(RunDir(tiny_run).read_spec()["rung"], [Source.parse(str(tiny_run))],
                  device="cpu")
    try:
        yield build_app(slots, max_queue=8)
    finally:
        slots.close()


@pytest.fixture(scope="module")
def url(app):
    with serving(app) as u:
        yield u


def test_a_burst_of_200_gets_only_200s_and_503s(url):
    async def burst():
        limits = httpx.Limits(max_connections=250, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as c:
            async def one(i):
                body = {"model": "base", "prompt": f"fn add{i}(", "max_tokens": 8,
                        "stream": i % 4 == 0}
                r = await c.post("/v1/completions", json=body)
                await r.aread()
                return r
            done = await asyncio.gather(*(one(i) for i in range(200)))
            health = (await c.get("/health")).json()
            return done, health

    done, health = asyncio.run(burst())
    codes = collections.Counter(r.status_code for r in done)
    assert set(codes) <= {200, 503}, codes
    assert codes[503] > 0 and 9 <= codes[200] < 200, codes
    busy = next(r for r in done if r.status_code == 503)
    err = busy.json()["error"]
    assert err["code"] == "server_busy" and err["type"] == "server_error"
    assert "serve.max_queue=8" in err["message"] and int(busy.headers["Retry-After"]) >= 1
    assert health["queue"] == {"depth": 0, "in_flight": 0, "max_queue": 8}


def _health(url: str) -> dict:
    return httpx.get(f"{url}/health", timeout=60).json()


def test_200_streams_that_hang_up_before_the_first_chunk_leave_the_queue_empty(url):
    """Issue #37: a streaming request whose client leaves before the body starts must give its
    place back. Raw sockets: each sends a whole streaming request and closes at once, so the
    server sees the hang-up anywhere from before the body is read to after the response began
    (the window in between is where the place used to leak: Starlette cancels a stream whose
    client is gone before its generator ever runs, so nothing inside the generator can release)."""
    import socket
    import time
    from urllib.parse import urlsplit

    host, port = urlsplit(url).hostname, urlsplit(url).port
    body = json.dumps({"model": "base", "prompt": "fn add(", "max_tokens": 1, "stream": True})
    raw = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode()
    for _ in range(200):
        with socket.create_connection((host, port), timeout=30) as s:
            s.sendall(raw)
    # a place is held until the model thread is done with its request: wait for those
    # (generous deadline: a loaded box; the leak this guards against never drains)
    deadline = time.monotonic() + 120
    while _health(url)["queue"]["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _health(url)["queue"] == {"depth": 0, "in_flight": 0, "max_queue": 8}
    r = httpx.post(f"{url}/v1/completions", timeout=120,
                   json={"model": "base", "prompt": "fn add(", "max_tokens": 2, "stream": True})
    assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]"), r.text[:300]


def _wait_empty(url: str) -> dict:
    """/health once the model thread is done with what it was given (a place is held until
    then); a generous deadline for a loaded box — a leaked place never drains."""
    import time
    deadline = time.monotonic() + 120
    while _health(url)["queue"]["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.2)
    return _health(url)["queue"]


def test_a_stream_whose_client_is_gone_when_the_body_starts_gives_its_place_back(app, url):
    """ASGI 2.4 servers raise OSError from `send` once the client is gone, and Starlette then
    never iterates the stream's generator (StreamingResponse.__call__, the spec >= 2.4
    branch) — so a place released inside the generator leaked. uvicorn 0.55 speaks 2.3 (its
    `send` drops messages to a gone client and Starlette runs the generator's first step), so
    this drives the real app's ASGI callable the way a 2.4 server would: the request arrives
    whole, then every `send` raises OSError. The queue is then read over real HTTP."""
    body = json.dumps({"model": "base", "prompt": "fn add(", "max_tokens": 1,
                       "stream": True}).encode()
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"},
             "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/completions", "raw_path": b"/v1/completions", "query_string": b"",
             "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
             "headers": [(b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())]}
    statuses = []

    async def gone_client():
        sent = [False]

        async def receive():
            if not sent[0]:
                sent[0] = True
                return {"type": "http.request", "body": body, "more_body": False}
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.start":
                statuses.append(message["status"])
            raise OSError("the client closed the connection")

        try:
            await app(dict(scope), receive, send)
        except Exception:   # the server's to handle: the ASGI app may let OSError out
            pass

    async def twenty():
        for _ in range(20):
            await gone_client()

    asyncio.run(twenty())
    assert statuses.count(200) >= 9, statuses   # each was admitted, its stream never ran
    assert _wait_empty(url) == {"depth": 0, "in_flight": 0, "max_queue": 8}
    r = httpx.post(f"{url}/v1/completions", timeout=120,
                   json={"model": "base", "prompt": "fn add(", "max_tokens": 2})
    assert r.status_code == 200, r.text[:300]
