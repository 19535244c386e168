"""A bounded queue (issue #25, `serve.max_queue`): a burst of 200 concurrent requests against
max_queue=8 gets only 200s and 503s — the 503s at once, in OpenAI's error shape with
Retry-After — and /health says the queue's depth. The real app over real Slots (the tiny base +
the tiny run's adapter), served by uvicorn on 127.0.0.1 in this process."""
from __future__ import annotations

import asyncio
import collections

import httpx
import pytest

from mens.serve.admission import Admission, QueueFull
from serve_util import serving


def test_admission_counts_one_running_and_max_queue_waiting():
    a = Admission(2)
    tickets = [a.enter() for _ in range(3)]            # one running + two waiting
    assert a.state() == {"depth": 2, "in_flight": 3, "max_queue": 2}
    with pytest.raises(QueueFull) as e:
        a.enter()
    assert e.value.retry_after >= 1 and "serve.max_queue=2" in str(e.value)
    a.leave(tickets[0])
    a.enter()                                          # a place came free
    assert a.state()["in_flight"] == 3


@pytest.fixture(scope="module")
def url(tiny_run):
    from mens.run.rundir import RunDir
    from mens.serve.openai_api import build_app
    from mens.serve.slots import Slots, Source

    slots = Slots(RunDir(tiny_run).read_spec()["rung"], [Source.parse(str(tiny_run))],
                  device="cpu")
    try:
        with serving(build_app(slots, max_queue=8)) as u:
            yield u
    finally:
        slots.close()


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
