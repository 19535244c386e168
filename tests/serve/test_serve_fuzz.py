"""Hostile input against the real server: hundreds of malformed requests, none answered 5xx,
the server healthy and answering as before afterwards; concurrent clients never interleave."""
from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from serve_util import adapter_copy, running_server, vox_prompts

BODY_CAP, HEADER_CAP = 65536, 8192


@pytest.fixture(scope="module")
def server(tiny_run, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    loud = adapter_copy(tiny_run, tmp / "loud", 2.0)
    with running_server(tmp, f"run={tiny_run}", f"serve.adapters=['loud={loud}']",
                        f"serve.max_body_bytes={BODY_CAP}",
                        f"serve.max_header_bytes={HEADER_CAP}") as (url, proc):
        yield url, proc


def ok_body(**kw) -> dict:
    body = {"model": "base", "messages": [{"role": "user", "content": "Print 1 in Vox."}],
            "max_tokens": 1, "temperature": 0}
    body.update(kw)
    return {k: v for k, v in body.items() if v is not DROP}


DROP = object()


def json_cases(rng: random.Random) -> list[tuple[str, str, bytes, dict, set]]:
    """(name, path, body bytes, extra headers, allowed statuses)."""
    chat, comp = "/v1/chat/completions", "/v1/completions"
    cases = []

    def add(name, body, allowed, path=chat, headers=None):
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        cases.append((name, path, raw, headers or {}, allowed))

    # invalid JSON: truncations of a valid body, garbage, pathological nesting
    good = json.dumps(ok_body()).encode()
    for cut in sorted(rng.sample(range(1, len(good) - 1), 15)):
        add(f"truncated@{cut}", good[:cut], {400})
    for junk in [b"", b"{", b"nul", b"{'model': 'base'}", b"\xff\xfe\x00\x01", b"[1,2",
                 b'{"model": "base", "messages": [}', b"[" * 50000, b'{"a":' * 10000,
                 b"\x00" * 100, b'"just a string"', b"12345", b"true", b"null", b"[]"]:
        add(f"junk:{junk[:12]!r}", junk, {400})
    for _ in range(6):
        add("random-printable", bytes(rng.choice(b"{}[]:,\"abc 123") for _ in range(60)), {400})
    # wrong types and values, field by field
    bad = {"model": [1, None, [], {}, True],
           "messages": ["hi", 1, None, {}, [1], [{"role": "user"}],
                        [{"role": "user", "content": 1}], [{"role": "wizard", "content": "x"}],
                        [{"role": "tool", "content": "x"}], [{"content": "x"}],
                        [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
                        [{"role": "user", "content": [{"type": "text"}]}], [None]],
           "max_tokens": ["5", 1.5, True, [], {}, 0, -1, -2**40, 4096, 10**6, 2**62],
           "max_completion_tokens": [0, "1", 10**9],
           "temperature": ["0", -0.1, 2.5, True, [], 1e400],
           "top_p": [0, -1, 1.5, "1", False], "stop": [1, [1], ["a"] * 5, [""], "", {}],
           "stream": ["yes", 1, [], {}], "seed": ["1", 1.5, 2**70, -2**70], "n": [0, 65, "1"],
           "stream_options": ["x", {"include_usage": "y"}], "logprobs": [3, "x"],
           "presence_penalty": [0.5, "x"], "frequency_penalty": [-1.0],
           "tools": [[{"type": "function"}]], "logit_bias": [{"1": 5}, "x"]}
    for key, values in bad.items():
        for v in values:
            add(f"{key}={v!r}"[:60], ok_body(**{key: v}), {400})
            if key in ("max_tokens", "messages", "temperature"):
                add(f"stream+{key}={v!r}"[:60], ok_body(stream=True, **{key: v}), {400})
    for key in ("model", "messages"):
        add(f"missing {key}", ok_body(**{key: DROP}), {400})
    # unknown models (404 in OpenAI's shape)
    for m in ["nope", "", "BASE", "base ", "vox_lang:champ", ":champion", "x" * 10000, "😀",
              "../../etc/passwd", "vox_lang:challenger:x", "loud\n", "structured_shell:champion"]:
        add(f"model={m[:20]!r}", ok_body(model=m), {404})
    # empty / oversize conversations, context overflow, odd text
    add("empty messages", ok_body(messages=[]), {400})
    add("prompt over context", ok_body(messages=[{"role": "user", "content": "a b " * 15000}]), {400})
    add("lone surrogate", b'{"model":"base","messages":[{"role":"user","content":"\\ud800"}],'
                          b'"max_tokens":1}', {200, 400})
    add("NaN temperature", b'{"model":"base","messages":[{"role":"user","content":"x"}],'
                           b'"temperature":NaN}', {400})
    # /v1/completions
    for p in ["", [], [[]], ["a", ""], [5000], [-1], [1] * 5000, 5, None, {"x": 1}, [[1], []]]:
        add(f"completion prompt={str(p)[:20]}", {"model": "base", "prompt": p, "max_tokens": 1}, {400}, comp)
    add("completion echo", {"model": "base", "prompt": "x", "echo": True, "max_tokens": 1}, {400}, comp)
    add("completion lone surrogate", b'{"model":"base","prompt":"\\udfff","max_tokens":1}', {200, 400}, comp)
    # hostile but valid sampling values: served (one token), never a crash
    for kw in [{"temperature": 1e-300}, {"temperature": 2.0, "top_p": 1e-300},
               {"temperature": 1.0, "seed": -2**63}, {"temperature": 1.0, "seed": 2**64 - 1},
               {"stop": ["\u0000", "😀"]}]:
        add(f"valid {kw}"[:60], ok_body(**kw), {200})
    # a field the server does not implement is refused by name, never dropped silently
    add("unknown field", ok_body(max_tokens=1, extra_field=[1, 2, 3]), {400})
    # bodies over the cap: 413
    add("body over cap", ok_body(messages=[{"role": "user", "content": "x" * (BODY_CAP + 10)}]), {413})
    add("body 3x cap", b" " * (3 * BODY_CAP), {413})
    # content types, methods, paths, admin
    add("text/plain body", good, {400}, chat, {"content-type": "text/plain"})
    add("form body", b"model=base", {400}, chat, {"content-type": "application/x-www-form-urlencoded"})
    add("admin promote unknown spoke", {"spoke": "nope"}, {404}, "/admin/promote")
    add("admin promote bad body", {"spoke": 5}, {400}, "/admin/promote")
    add("admin rollback nothing", {"spoke": "vox_lang"}, {400}, "/admin/rollback")
    add("unknown path", good, {404}, "/v1/embeddings")
    add("traversal path", good, {404}, "/v1/../../etc/passwd")
    return cases


def raw_exchange(port: int, pieces: list[bytes], pause: float = 0.0) -> bytes:
    """Send bytes over a plain socket (half-closing it after); whatever comes back."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    buf = b""
    try:
        for p in pieces:
            s.sendall(p)
            if pause:
                time.sleep(pause)
        s.shutdown(socket.SHUT_WR)
    except OSError:   # the server answered and closed while we were still sending
        pass
    try:
        while chunk := s.recv(65536):
            buf += chunk
    except OSError:
        pass
    s.close()
    return buf


def status_of(buf: bytes) -> int | None:
    """HTTP status of a raw answer; None when the server just closed the connection."""
    return int(buf[9:12]) if buf.startswith(b"HTTP/1.1 ") else None


def raw_cases(rng: random.Random, port: int) -> list[tuple[str, list[bytes], float, set]]:
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    cases = []
    for i in range(30):   # random bytes, sometimes after a plausible request line
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 2000)))
        prefix = rng.choice([b"", b"GET / HTTP/1.1\r\n", head, b"POST "])
        cases.append((f"random bytes {i}", [prefix + junk], 0.0, {400, None}))
    for cl in [b"abc", b"-1", b"1.5", b"0x10", b" 12 3", b"99999999999999999999999"]:
        cases.append((f"content-length {cl!r}", [head + b"Content-Length: " + cl + b"\r\n\r\n{}"],
                      0.0, {400, 413, None}))
    cases.append(("two content-lengths", [head + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}"],
                  0.0, {400, None}))
    cases.append(("content-length + chunked", [head + b"Content-Length: 2\r\n"
                                                      b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"],
                  0.0, {400, None}))
    cases.append(("bad chunk size", [head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"],
                  0.0, {400, None}))
    cases.append(("declared 1 TB body", [head + b"Content-Length: 1000000000000\r\n\r\n{}"],
                  0.0, {413}))
    body = json.dumps(ok_body()).encode() + b" " * (2 * BODY_CAP)
    cases.append(("declared 2x cap body", [head + b"Content-Length: %d\r\n\r\n" % len(body) + body],
                  0.0, {413}))
    chunked = b"".join(b"%x\r\n%s\r\n" % (8192, b" " * 8192) for _ in range(12)) + b"0\r\n\r\n"
    cases.append(("chunked over cap", [head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked],
                  0.0, {413}))
    # headers over serve.max_header_bytes: at once (checked by the app) or dribbled (by h11)
    big = b"X-Big: " + b"a" * (HEADER_CAP + 100) + b"\r\n"
    cases.append(("one huge header", [head + big + b"\r\n"], 0.0, {431}))
    many = b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 90) for i in range(120))
    cases.append(("many headers", [head + many + b"\r\n"], 0.0, {431}))
    cases.append(("huge url", [b"GET /v1/models?" + b"q" * (HEADER_CAP + 10) + b" HTTP/1.1\r\n"
                               b"Host: x\r\n\r\n"], 0.0, {431}))
    dribble = head + big + b"\r\n"
    cases.append(("dribbled huge header", [dribble[i:i + 512] for i in range(0, len(dribble), 512)],
                  0.01, {431}))
    cases.append(("HTTP/2 preface", [b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"], 0.0, {400, 404, None}))
    cases.append(("bare newlines", [b"\n" * 5000], 0.0, {400, None}))
    return cases


def test_fuzz_never_5xx(server):
    url, proc = server
    port = int(url.rsplit(":", 1)[1])
    rng = random.Random(6)
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)
    msgs = vox_prompts(1)[0]
    before = client.chat.completions.create(model="loud", messages=msgs, max_tokens=16,
                                            temperature=0).choices[0].message.content
    seen, wrong = Counter(), []
    with httpx.Client(base_url=url, timeout=120) as http:
        for name, path, body, headers, allowed in json_cases(rng):
            r = http.post(path, content=body, headers={"content-type": "application/json", **headers})
            seen[r.status_code] += 1
            if r.status_code not in allowed:
                wrong.append((name, r.status_code, r.text[:200]))
            if r.status_code >= 400:   # OpenAI's error shape, every time
                err = r.json()["error"]
                assert set(err) == {"message", "type", "param", "code"}, (name, r.text[:200])
        for method, path, allowed in [("GET", "/v1/chat/completions", {405}), ("PUT", "/v1/models", {405}),
                                      ("DELETE", "/health", {405}), ("GET", "/v1/models/nope", {404}),
                                      ("OPTIONS", "/v1/completions", {405}), ("GET", "/", {404})]:
            r = http.request(method, path)
            seen[r.status_code] += 1
            if r.status_code not in allowed:
                wrong.append((f"{method} {path}", r.status_code, r.text[:200]))
        # a streaming client that goes away after the first chunk
        with http.stream("POST", "/v1/chat/completions", json=ok_body(max_tokens=64, stream=True)) as r:
            next(r.iter_lines())
            seen[r.status_code] += 1
    for name, pieces, pause, allowed in raw_cases(rng, port):
        status = status_of(raw_exchange(port, pieces, pause))
        seen[status or "closed"] += 1
        if status not in allowed:
            wrong.append((name, status, ""))
    total = sum(seen.values())
    print(f"\nfuzz: {total} requests, by status: {dict(sorted(seen.items(), key=str))}")
    assert total >= 200
    assert not [k for k in seen if isinstance(k, int) and k >= 500]
    assert not wrong, wrong
    assert proc.poll() is None
    assert httpx.get(f"{url}/health", timeout=30).status_code == 200
    after = client.chat.completions.create(model="loud", messages=msgs, max_tokens=16, temperature=0)
    assert after.choices[0].message.content == before


def test_concurrent_clients_get_the_sequential_answer(server, tiny_run):
    url, _ = server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=600)
    prompts = vox_prompts(4)
    models = ["base", tiny_run.name, "loud"]
    jobs = [(models[i % 3], prompts[i % 4], i % 4 == 3, 0.8 if i in (2, 5) else 0.0)
            for i in range(8)]   # stream every 4th; two seeded samplers

    def ask(job):
        model, msgs, stream, temp = job
        kw = dict(model=model, messages=msgs, max_tokens=20, temperature=temp, seed=11)
        if stream:
            return "".join(c.choices[0].delta.content or "" for c in
                           client.chat.completions.create(stream=True, **kw) if c.choices)
        return client.chat.completions.create(**kw).choices[0].message.content

    sequential = [ask(j) for j in jobs]
    assert len(set(sequential)) > 1
    barrier = threading.Barrier(len(jobs))

    def at_once(job):
        barrier.wait()
        return ask(job)

    with ThreadPoolExecutor(len(jobs)) as pool:
        concurrent = list(pool.map(at_once, jobs))
    assert concurrent == sequential
