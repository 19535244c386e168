"""Issue #38's acceptance, end to end through the commands a user runs: a tool-calling dataset
written here (tests/tooldata.py: 800 OpenAI-format records over six tools, two offered per
record, arguments taken from the user's words, a tenth needing no call), the tiny rung trained
with the defaults (`python -m mens data=file …`), `python -m mens.eval` scoring the held-out
prompts' calls (exact, schema-valid, relevance — each with its interval and n), and
`python -m mens.serve` answering the official `openai` client with `tool_calls` whose arguments
validate against the tool's schema. Slow: one training, one evaluation, one server.

What the tiny rung reaches here is printed and kept in the eval.json the test leaves; the
asserted floors are what it reliably learns: the call's syntax, a declared tool and schema-valid
arguments (≥ 80 % of held-out prompts, base ~0), not the copying of values out of the prompt —
exact calls stay low (the 4.2M-parameter base has no in-context copying: it cannot repeat 'Oslo'
from `f(city='Oslo')` either), which the README states with the measured figure."""
from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import openai
import pytest

from serve_util import running_server
from tooldata import write

pytestmark = pytest.mark.slow


def _mens(tmp, *args, module="mens"):
    out = subprocess.run([sys.executable, "-m", module, *args], cwd=tmp, capture_output=True,
                         text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agent")
    # 800, not fewer: on 400 records the tuned rung's held-out calls were 12 % schema-valid
    # (4 of 32) and 6 of 36 served — short of the ≥ 80 % floor (measured 2026-12-03)
    write(tmp / "train.jsonl", 800, seed=1, k=2, result_share=0.0)
    held = write(tmp / "held.jsonl", 40, seed=2, k=2, result_share=0.0)
    data = ["+hw=cpu", "data=file", "data.path=train.jsonl", "data.eval_path=held.jsonl"]
    _mens(tmp, *data, "logger=csv", "hydra.run.dir=run")
    _mens(tmp, *data, "run=run", "eval.k=0", "eval.collateral=false", "eval.max_new_tokens=64",
          "logger=csv", module="mens.eval")
    return tmp, held


def test_the_tuned_tiny_rung_makes_schema_valid_calls_where_the_base_makes_none(trained):
    tmp, _ = trained
    ev = json.loads((tmp / "run" / "eval.json").read_text())
    rows = {r["name"].split("/", 1)[1]: r for r in ev["rows"] if "/tool_call/" in r["name"]}
    exact, valid, rel = (rows[f"tool_call/{m}"] for m in ("exact", "schema_valid", "relevance"))
    print(f"\nheld-out tool calls, base → tuned (n={valid['n']}): "
          f"exact {exact['base']['value']:.2f} → {exact['tuned']['value']:.2f} "
          f"{exact['tuned']['ci']}; schema-valid {valid['base']['value']:.2f} → "
          f"{valid['tuned']['value']:.2f} {valid['tuned']['ci']}; relevance "
          f"{rel['tuned']['value']} (n={rel['n']})")
    assert valid["n"] >= 20 and exact["n"] == valid["n"]           # ≥ eval.min_items: judged
    assert valid["base"]["value"] <= 0.1 and exact["base"]["value"] <= 0.1
    assert valid["tuned"]["value"] >= 0.8
    for r in (exact, valid):                                      # intervals shown, with n
        assert r["tuned"]["ci"] and r["gain"]["ci"] and r["gain"]["n"] == r["n"]
    assert valid["gain"]["ci"][0] > 0                              # a gain, with confidence


def test_the_server_answers_the_openai_client_with_valid_tool_calls(trained):
    tmp, held = trained
    prompts = [r for r in held if len(r["messages"]) > 1 and r["messages"][1].get("tool_calls")]
    schema = {t["function"]["name"]: t["function"]["parameters"] for r in held for t in r["tools"]}
    with running_server(tmp, "run=run") as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)
        valid = 0
        for r in prompts:
            answer = client.chat.completions.create(
                model="run", messages=r["messages"][:1], tools=r["tools"], temperature=0,
                max_tokens=64).choices[0]
            calls = answer.message.tool_calls or []
            if answer.finish_reason == "tool_calls" and len(calls) == 1 and \
                    calls[0].function.name in schema:
                args = json.loads(calls[0].function.arguments)     # a JSON string, as OpenAI's
                if not list(jsonschema.Draft202012Validator(
                        schema[calls[0].function.name]).iter_errors(args)):
                    valid += 1
    print(f"\nserved: {valid} of {len(prompts)} held-out prompts got a schema-valid tool call")
    assert len(prompts) >= 30 and valid >= 0.8 * len(prompts)
