"""What `mens serve` gained for rollouts (issue #39), on a real HTTP server on 127.0.0.1 (mens's
app on uvicorn in a thread, over the tiny base): `n` choices in one batch, `logprobs` /
`top_logprobs` in OpenAI's response shape (read back by the official `openai` client), vLLM's
`return_token_ids`, batches of prompts, and adapters loaded / unloaded at runtime on vLLM's
routes — refused unless `serve.runtime_lora=true`."""
from __future__ import annotations

import httpx
import openai
import pytest
import torch

from serve_util import serving, tiny_slots, random_lora


@pytest.fixture(scope="module")
def slots():
    with tiny_slots() as s:
        yield s


@pytest.fixture(scope="module")
def url(slots):
    from mens.serve.openai_api import build_app
    with serving(build_app(slots, runtime_lora=True)) as u:
        yield u


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    return random_lora(tmp_path_factory.mktemp("adapter") / "a")


def post(url, route, body, status=200):
    r = httpx.post(f"{url}{route}", json=body, timeout=300)
    assert r.status_code == status, r.text
    return r.json()


def test_chat_n_logprobs_through_the_openai_client(url):
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=300)
    r = client.chat.completions.create(model="base", messages=[{"role": "user", "content": "hi"}],
                                       n=3, max_tokens=6, logprobs=True, top_logprobs=2, seed=5)
    assert [c.index for c in r.choices] == [0, 1, 2]
    for c in r.choices:
        content = c.logprobs.content
        assert 1 <= len(content) <= 6 and all(len(t.top_logprobs) == 2 for t in content)
        for t in content:      # the drawn token is never likelier than the likeliest one
            assert t.logprob <= t.top_logprobs[0].logprob + 1e-6 <= 1e-6
        if c.finish_reason == "length":    # no end token: the pieces' bytes are the text
            assert b"".join(bytes(t.bytes) for t in content).decode() == c.message.content
    greedy = client.chat.completions.create(
        model="base", messages=[{"role": "user", "content": "hi"}], max_tokens=6,
        temperature=0.0, logprobs=True, top_logprobs=1)
    assert all(t.token == t.top_logprobs[0].token for t in greedy.choices[0].logprobs.content)
    plain = client.chat.completions.create(          # the one-answer path, not the batch one
        model="base", messages=[{"role": "user", "content": "hi"}], max_tokens=6, temperature=0.0)
    assert plain.choices[0].message.content == greedy.choices[0].message.content


def test_completions_batch_token_ids_and_legacy_logprobs(url, slots):
    prompts = [slots.encode("fn main() {"), slots.encode("let x =")]
    r = post(url, "/v1/completions", {"model": "base", "prompt": prompts, "n": 2,
                                      "max_tokens": 5, "logprobs": 0, "seed": 3,
                                      "return_token_ids": True})
    assert len(r["choices"]) == 4 and [c["index"] for c in r["choices"]] == [0, 1, 2, 3]
    for c in r["choices"]:
        assert c["prompt_token_ids"] == prompts[c["index"] // 2]
        lp = c["logprobs"]
        assert len(lp["token_logprobs"]) == len(c["token_ids"]) == len(lp["content"])
        assert lp["top_logprobs"] is None and lp["text_offset"][0] == 0
    assert r["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in r["choices"])
    assert r["usage"]["prompt_tokens"] == sum(map(len, prompts))


@pytest.mark.parametrize("body, param", [
    ({"n": 2, "stream": True}, "stream"),
    ({"logprobs": 1, "stream": True}, "stream"),
    ({"n": 65}, "n"),
    ({"logprobs": 21}, "logprobs"),
    ({"prompt": [[1, 2]] * 200, "n": 2}, "prompt"),
])
def test_what_is_not_served_is_refused(url, body, param):
    r = httpx.post(f"{url}/v1/completions",
                   json={"model": "base", "prompt": "x", "max_tokens": 2, **body}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    if param == "stream":    # chat too, and top_logprobs without logprobs (OpenAI's rule)
        chat = {"model": "base", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
        for more, name in (({"n": 2, "stream": True}, "stream"), ({"top_logprobs": 2}, "top_logprobs")):
            r = httpx.post(f"{url}/v1/chat/completions", json={**chat, **more}, timeout=60)
            assert r.status_code == 400 and r.json()["error"]["param"] == name, r.text


def test_runtime_adapter_load_and_unload(url, slots, adapter):
    msgs = [{"role": "user", "content": "hi"}]

    def ask(m):   # the greedy answer's per-token log-probs: what the weights say, exactly
        c = post(url, "/v1/chat/completions", {"model": m, "messages": msgs, "max_tokens": 8,
                                               "temperature": 0.0, "logprobs": True})
        return torch.tensor([t["logprob"] for t in c["choices"][0]["logprobs"]["content"]])

    def same(a, b):
        return a.shape == b.shape and torch.allclose(a, b, atol=1e-5)
    base = ask("base")
    post(url, "/v1/load_lora_adapter", {"lora_name": "p1", "lora_path": str(adapter)})
    assert "p1" in [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]]
    tuned = ask("p1")
    assert not same(tuned, base)                           # the adapter is in use
    post(url, "/v1/load_lora_adapter", {"lora_name": "p1", "lora_path": str(adapter)}, 400)
    post(url, "/v1/load_lora_adapter", {"lora_name": "p2", "lora_path": str(adapter)})
    post(url, "/v1/unload_lora_adapter", {"lora_name": "p1"})
    assert same(ask("p2"), tuned)                          # the same weights under a new name
    post(url, "/v1/chat/completions", {"model": "p1", "messages": msgs}, 404)
    post(url, "/v1/unload_lora_adapter", {"lora_name": "p2"})   # the last: the bare base again
    assert same(ask("base"), base)
    post(url, "/v1/load_lora_adapter", {"lora_name": "p3", "lora_path": str(adapter)})
    assert same(ask("p3"), tuned)
    post(url, "/v1/unload_lora_adapter", {"lora_name": "p3"})
    post(url, "/v1/unload_lora_adapter", {"lora_name": "nope"}, 404)
    post(url, "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/nonexistent"}, 400)
    post(url, "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": str(adapter),
                                        "load_inplace": True}, 400)   # named, not ignored


def test_runtime_adapters_are_off_unless_asked(slots, adapter):
    from mens.serve.openai_api import build_app
    with serving(build_app(slots)) as u:
        for route, body in (("/v1/load_lora_adapter", {"lora_name": "p", "lora_path": str(adapter)}),
                            ("/v1/unload_lora_adapter", {"lora_name": "p"})):
            r = httpx.post(f"{u}{route}", json=body, timeout=60)
            assert r.status_code == 403 and "serve.runtime_lora=true" in r.json()["error"]["message"]
