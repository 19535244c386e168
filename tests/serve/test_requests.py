"""What the API refuses and how it fails, on the real app served by uvicorn on 127.0.0.1 in
this process (real Slots on the tiny base + the tiny run's adapter): every field it does not
implement is a 400 naming them all; an exception on the model thread is a JSON 500."""
from __future__ import annotations


import httpx
import openai
import pytest

from serve_util import serving, vox_prompts


@pytest.fixture(scope="module")
def url(tiny_run):
    """The app over base + the tiny run, plus `ghost`: a slot naming an adapter the PeftModel
    never loaded, so PEFT's own `set_adapter` raises on the model thread for every request."""
    from mens.run.rundir import RunDir
    from mens.serve.openai_api import build_app
    from mens.serve.slots import Slot, Slots, Source

    slots = Slots(RunDir(tiny_run).read_spec()["rung"], [Source.parse(str(tiny_run))],
                  device="cpu")
    slots.slots["ghost"] = Slot("ghost", "never_loaded")
    try:
        with serving(build_app(slots)) as u:
            yield u
    finally:
        slots.close()


def body(**kw) -> dict:
    return {"model": "base", "messages": [{"role": "user", "content": "Print 1 in Vox."}],
            "max_tokens": 2, "temperature": 0, **kw}


def test_every_unimplemented_field_is_a_400_naming_them_all(url, tiny_run):
    chat = f"{url}/v1/chat/completions"
    # each alone: OpenAI fields mens does not implement, vendor extensions, typos
    # (tools, tool_choice and parallel_tool_calls are served: tests/serve/test_tools.py; n,
    # logprobs, top_logprobs: tests/serve/test_rollout_serve.py)
    for extra in [{"response_format": {"type": "json_object"}}, {"function_call": "auto"},
                  {"user": "alice"}, {"metadata": {"a": "b"}}, {"store": False},
                  {"functions": [{"name": "f"}]}, {"max_token": 5}, {"extra_field": [1, 2]},
                  {"logit_bias": {"1": 5}}, {"presence_penalty": 0.5}]:
        r = httpx.post(chat, json=body(**extra))
        (key,) = extra
        assert r.status_code == 400, (extra, r.text)
        err = r.json()["error"]
        assert (err["type"], err["param"], err["code"]) == \
            ("invalid_request_error", key, "unsupported_parameter"), err
        assert f"`{key}`" in err["message"]
    # several at once, nested ones included: one 400 that names every one of them
    many = body(response_format={"type": "text"}, function_call="none", frequency_penalty=1.0, seed=1,
                stream_options={"include_usage": True, "continuous_usage_stats": True},
                messages=[{"role": "user", "name": "bob", "content": [
                    {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}])
    err = httpx.post(chat, json=many).json()["error"]
    for key in ("response_format", "function_call", "frequency_penalty", "stream_options.continuous_usage_stats",
                "messages.0.name", "messages.0.content.0.cache_control"):
        assert f"`{key}`" in err["message"], (key, err["message"])
    assert "`seed`" not in err["message"]
    # /v1/completions: its own unimplemented fields, and chat's `max_completion_tokens`
    r = httpx.post(f"{url}/v1/completions", json={"model": "base", "prompt": "x", "max_tokens": 1,
                                                   "echo": True, "max_completion_tokens": 3})
    assert r.status_code == 400
    assert "`echo`" in r.json()["error"]["message"]
    assert "`max_completion_tokens`" in r.json()["error"]["message"]
    # stream_options without streaming is refused, as OpenAI does, never ignored
    r = httpx.post(chat, json=body(stream_options={"include_usage": True}))
    assert (r.status_code, r.json()["error"]["param"]) == (400, "stream_options"), r.text
    # the admin endpoints too
    r = httpx.post(f"{url}/admin/rollback", json={"spoke": "vox_lang", "force": True})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "force")
    # the official client: what it sends by default, and everything implemented, is served
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)
    msgs = vox_prompts(1)[0]
    kw = dict(model=tiny_run.name, messages=msgs, max_tokens=4, temperature=0.7, top_p=0.9,
              seed=3, stop=["\n\n"])
    plain = client.chat.completions.create(**kw)
    assert plain.choices[0].message.content is not None
    noop = client.chat.completions.create(n=1, logprobs=False, presence_penalty=0.0,
                                          frequency_penalty=0.0, logit_bias={}, tools=[],
                                          top_logprobs=0, **kw)
    assert noop.choices[0].message.content == plain.choices[0].message.content
    # max_completion_tokens for max_tokens; a null is OpenAI's "not given", whatever the field
    same = client.chat.completions.create(**{k: v for k, v in kw.items() if k != "max_tokens"},
                                          max_completion_tokens=4, extra_body={"user": None})
    assert same.choices[0].message.content == plain.choices[0].message.content
    streamed = client.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                              **kw)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == \
        plain.choices[0].message.content
    done = client.completions.create(model="base", prompt="x", max_tokens=2, temperature=0,
                                     n=1, echo=False, best_of=1, suffix="")
    assert done.choices[0].finish_reason == "length"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(response_format={"type": "json_object"}, user="alice",
                                       extra_body={"top_k": 5}, **kw)
    err = e.value.body
    assert err["param"] in ("response_format", "user", "top_k")   # the first of them
    assert err["code"] == "unsupported_parameter"
    assert all(f"`{k}`" in err["message"] for k in ("response_format", "user", "top_k"))
    # max_tokens and max_completion_tokens that disagree: neither is dropped silently
    r = httpx.post(chat, json=body(max_tokens=2, max_completion_tokens=3))
    assert (r.status_code, r.json()["error"]["param"]) == (400, "max_tokens")


def test_an_exception_on_the_model_thread_is_a_json_500(url):
    r = httpx.post(f"{url}/v1/chat/completions", json=body(model="ghost"), timeout=120)
    assert r.status_code == 500, r.text
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "server_error"
    assert "ValueError" in err["message"] and "never_loaded" in err["message"]
    r = httpx.post(f"{url}/v1/completions", json={"model": "ghost", "prompt": "x", "max_tokens": 1})
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    # through the official client: an InternalServerError carrying the body
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)
    with pytest.raises(openai.InternalServerError) as e:
        client.chat.completions.create(**body(model="ghost"))
    assert e.value.body["type"] == "server_error"
    # streamed, the failure comes as an error event once the stream has begun
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body(model="ghost", stream=True),
                      timeout=120) as r:
        lines = [x for x in r.iter_lines() if x]
    assert r.status_code == 200 and '"server_error"' in lines[-2] and lines[-1] == "data: [DONE]"
    # the model thread survives: the next request is served
    ok = httpx.post(f"{url}/v1/chat/completions", json=body(), timeout=120)
    assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] in ("length", "stop")
