"""`mens serve`'s batch path on Qwen3's 151,936-token vocabulary (issue #49): what one request may
hold, and for how long.

- log-probs cost one step's vocabulary, not one per token: a request of n=16 × 64 tokens with
  `logprobs` grows the server's peak by ≤ 10 % of what keeping every step's full-vocabulary scores
  (the old path: generate's `output_scores`, stacked, log-softmaxed) grows it by — both measured
  in this run, on the same model;
- a request over `serve.max_batch_tokens` (n=64 × 4096 tokens) is a 400 naming the limit and the
  key, before any model work;
- a non-streamed request whose client hangs up stops generating.

The model: Qwen3's architecture, its vocabulary, random weights and a small width (a real
Qwen3ForCausalLM built by transformers, mens.model.load's rung.init=random), so the vocabulary
dominates and a step is cheap. The app is mens's, on uvicorn on 127.0.0.1 in this process.
"""
from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from serve_util import serving, tiny_slots

VOCAB = 151936           # Qwen3's
WIDE = {"init": "random", "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 32, "max_position_embeddings": 40960}


@pytest.fixture(scope="module")
def slots():
    from omegaconf import OmegaConf

    from mens.config.compose import compose

    with tiny_slots({**OmegaConf.to_container(compose([]).rung, resolve=True), **WIDE}) as s:
        yield s


@pytest.fixture(scope="module")
def url(slots):
    from mens.serve.openai_api import build_app
    with serving(build_app(slots)) as u:
        yield u


def _rss() -> int:
    """This process's resident bytes now."""
    import psutil
    return psutil.Process().memory_info().rss


def _peak_growth(fn) -> tuple[int, object]:
    """(peak RSS during fn − RSS before it, fn's result): the kernel's high-water mark, reset
    first (Linux: writing 5 to /proc/self/clear_refs sets VmHWM to the current RSS). Freed heap
    is given back to the system first (glibc's malloc_trim), so memory an earlier request left
    in malloc's free lists cannot hide a growth."""
    import ctypes

    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _rss()
    out = fn()
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    return hwm - before, out


@pytest.mark.slow
def test_logprobs_grow_the_peak_by_a_tenth_of_keeping_every_steps_vocabulary(slots, url):
    import torch

    from mens.model import generate as gen

    n, T, prompt = 16, 64, "fn add("
    body = {"model": "base", "prompt": prompt, "n": n, "max_tokens": T, "logprobs": 0,
            "seed": 1}

    def served():
        r = httpx.post(f"{url}/v1/completions", json=body, timeout=600)
        assert r.status_code == 200, r.text
        return r.json()

    def kept_scores():
        """What the batch path did before: every step's scores kept, stacked, log-softmaxed."""
        ids, mask = gen.left_pad([slots.encode(prompt)], slots.pad, slots.device)
        config = gen.generation_config(T, slots.eos, slots.pad, sample=True, n=n,
                                       output_scores=True, return_dict_in_generate=True)
        torch.manual_seed(1)
        with torch.inference_mode():
            out = gen.generate(slots.model, ids, mask, config)
            logp = torch.stack(out.scores, dim=1).float().log_softmax(-1)   # (N, T, V)
        return logp.shape

    for _ in range(2):                         # warm-up: first calls' allocations do not count
        served()
    new, answer = _peak_growth(served)
    old, shape = _peak_growth(kept_scores)
    lengths = [len(c["logprobs"]["token_logprobs"]) for c in answer["choices"]]
    print(f"peak growth, n={n} × {T} tokens, vocab {VOCAB}: served with logprobs "
          f"{new / 2**20:.1f} MiB; keeping every step's scores {old / 2**20:.1f} MiB "
          f"({new / old:.1%})")
    assert tuple(shape) == (n, T, VOCAB) and min(lengths) > T // 2, (shape, lengths)
    assert new <= 0.10 * old, (new, old)


def test_a_request_over_max_batch_tokens_is_a_400_before_any_model_work(url):
    t0 = time.perf_counter()
    r = httpx.post(f"{url}/v1/completions", timeout=10,
                   json={"model": "base", "prompt": "fn add(", "n": 64, "max_tokens": 4096})
    took = time.perf_counter() - t0
    print(f"n=64 × 4096 tokens: {r.status_code} in {took * 1000:.0f} ms")
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert "serve.max_batch_tokens=65536" in err["message"] and err["param"] == "max_tokens"
    assert err["type"] == "invalid_request_error", err
    assert took < 1.0, took
    r = httpx.post(f"{url}/v1/chat/completions", timeout=60,
                   json={"model": "base", "messages": [{"role": "user", "content": "hi"}],
                         "n": 64, "max_completion_tokens": 4096})
    assert r.status_code == 400 and "serve.max_batch_tokens" in r.json()["error"]["message"]
    # a batch of prompts counts every row: 40 prompts × 2 × (2 + 1000) > 65536
    r = httpx.post(f"{url}/v1/completions", timeout=60,
                   json={"model": "base", "prompt": [[1, 2]] * 40, "n": 2, "max_tokens": 1000})
    assert r.status_code == 400 and "80 rows" in r.json()["error"]["message"], r.text[:300]
    assert httpx.get(f"{url}/health").json()["queue"]["in_flight"] == 0


def _in_flight(url: str) -> int:
    return httpx.get(f"{url}/health", timeout=60).json()["queue"]["in_flight"]


@pytest.mark.parametrize("route", ["completions", "batch"])
def test_a_request_whose_client_left_stops_generating(url, route):
    """Sent on a raw socket, closed once the model thread has it: the thread is free again long
    before the same request, answered whole, took (both timed in this run; the answer made
    long enough to take a second or more here, so the check's 0.1 s polls stay small in it)."""
    host, port = urlsplit(url).hostname, urlsplit(url).port
    body = {"model": "base", "prompt": "fn add(", "max_tokens": 150, "temperature": 0.0}
    if route == "batch":   # the batch path (mens.serve.batch): log-probs asked
        body.update(logprobs=1)
    while True:
        t0 = time.perf_counter()
        whole = httpx.post(f"{url}/v1/completions", json=body, timeout=600).json()
        full = time.perf_counter() - t0
        if full >= 1.0 or body["max_tokens"] >= 4800:
            break
        body["max_tokens"] *= 2
    assert all(c["finish_reason"] == "length" for c in whole["choices"]), whole["choices"]
    data = json.dumps(body)
    raw = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n{data}").encode()
    s = socket.create_connection((host, port), timeout=30)
    s.sendall(raw)
    deadline = time.monotonic() + full
    while not _in_flight(url) and time.monotonic() < deadline:
        time.sleep(0.02)
    t0 = time.perf_counter()
    s.close()                                   # the client leaves
    while _in_flight(url) and time.perf_counter() - t0 < 2 * full:
        time.sleep(0.02)
    freed = time.perf_counter() - t0
    print(f"{route}: the whole answer took {full:.2f} s; the model thread was free "
          f"{freed:.2f} s after the client left")
    assert freed < 0.5 * full, (freed, full)
