"""An agent loop against `python -m mens.serve` itself (issue #38): the server in a subprocess on
127.0.0.1 over a tiny model trained here to call `get_weather` (serve_util.train_tool_run), and
the official `openai` client doing what an agent framework does — ask with `tools`, run the
called function (a real Python function here), send the client's own assistant message back
with the tool's result, ask again — streamed and not. A call that does not parse (the untuned
base, made to open one) is content with 200, said in the server's log and counted in /health.
Slow: a training and a server start."""
from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from serve_util import WEATHER, running_server, train_tool_run

pytestmark = pytest.mark.slow
CITIES = ["Sydney", "Boston", "Moscow", "Toronto", "Perth", "Kyiv"]   # none it trained on


def get_weather(city: str) -> dict:   # the tool the agent runs
    return {"city": city, "sky": "clear", "celsius": 21}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tools_e2e")
    run = train_tool_run(tmp / "train")
    with running_server(tmp, f"run={run}") as (url, proc):
        yield url, run, tmp


def test_an_agent_loop_through_the_cli_server(server):
    url, run, tmp = server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)
    schema = WEATHER["function"]["parameters"]
    valid = 0
    for city in CITIES:
        ask = [{"role": "user", "content": f"What is the weather in {city}?"}]
        kw = dict(model=run.name, messages=ask, tools=[WEATHER], temperature=0, max_tokens=48)
        r = client.chat.completions.create(**kw)
        with client.chat.completions.stream(**kw) as s:
            streamed = s.get_final_completion()
        for answer in (r, streamed):
            assert answer.choices[0].finish_reason == "tool_calls", answer
            assert answer.choices[0].message.content is None
        (call,), (same,) = r.choices[0].message.tool_calls, streamed.choices[0].message.tool_calls
        assert (call.function.name, call.function.arguments) == \
            (same.function.name, same.function.arguments)
        args = json.loads(call.function.arguments)
        try:
            jsonschema.validate(args, schema)
            valid += 1
        except jsonschema.ValidationError:
            continue
        # run the tool, send the client's own message back with its result, ask again
        for held in (r.choices[0].message, streamed.choices[0].message):
            turn = [*ask, held, {"role": "tool", "tool_call_id": held.tool_calls[0].id,
                                 "content": json.dumps(get_weather(**args))}]
            again = client.chat.completions.create(**{**kw, "messages": turn})
            assert again.choices[0].finish_reason in ("tool_calls", "stop", "length")
    print(f"\nschema-valid calls: {valid}/{len(CITIES)}")
    assert valid == len(CITIES)
    # a call that does not parse: content, 200, loud in the log, counted
    r = httpx.post(f"{url}/v1/chat/completions", timeout=300, json={
        "model": "base", "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": [WEATHER], "tool_choice": "required", "temperature": 0, "max_tokens": 16})
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    assert "tool_calls" not in msg and msg["content"].startswith("<tool_call>")
    counts = httpx.get(f"{url}/health").json()["tool_calls"]
    assert counts["malformed"] >= 1 and counts["required_unmet"] >= 1
    assert counts["calls"] >= 2 * len(CITIES)
    assert "a tool call did not parse" in (tmp / "serve.log").read_text()
