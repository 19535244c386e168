"""`python -m mens.serve` for real: the server in a subprocess on a free 127.0.0.1 port, asked
through the official `openai` client, its answers checked against greedy decoding with
`peft.PeftModel` in this process."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import openai
import pytest
import torch

from serve_util import adapter_copy, running_server, vox_prompts

KEY = "sekret-test-key"
MAX = 24


@pytest.fixture(scope="module")
def dirs(tiny_run, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    return tmp, adapter_copy(tiny_run, tmp / "zero", 0.0), adapter_copy(tiny_run, tmp / "loud", 2.0)


@pytest.fixture(scope="module")
def server(tiny_run, dirs):
    tmp, zero, loud = dirs
    # the key by the name of its variable (the server inherits this environment); promotion
    # mechanics without gates here (tests/gate/test_promote.py gates them)
    os.environ["MENS_TEST_KEY"] = KEY
    try:
        with running_server(tmp, f"run={tiny_run}", f"serve.adapters=['zero={zero}','loud={loud}']",
                            "serve.api_key_env=MENS_TEST_KEY", "serve.require_gate=false") as (url, proc):
            yield url, proc
    finally:
        os.environ.pop("MENS_TEST_KEY", None)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server[0]}/v1", api_key=KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def ref(tiny_run, dirs):
    """Each slot rebuilt independently in this process: the plain base, and one fresh base
    wrapped by `PeftModel.from_pretrained` per adapter. greedy(name, messages, n) → (prompt ids,
    new ids, text)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mens.resources import ASSETS

    tok = AutoTokenizer.from_pretrained(str(ASSETS / "tiny"))

    def fresh():
        return AutoModelForCausalLM.from_pretrained(str(ASSETS / "tiny"), dtype=torch.float32).eval()

    _, zero, loud = dirs
    models = {"base": fresh()}
    for name, d in ((tiny_run.name, tiny_run), ("zero", zero), ("loud", loud)):
        models[name] = PeftModel.from_pretrained(fresh(), str(d / "adapter")).eval()

    def encode(messages):
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tok.encode(text, add_special_tokens=False)

    def greedy(name, messages, n=MAX):
        ids = encode(messages)
        x = torch.tensor([ids])
        with torch.inference_mode():
            out = models[name].generate(input_ids=x, attention_mask=torch.ones_like(x),
                                        max_new_tokens=n, do_sample=False)
        new = out[0, len(ids):].tolist()
        return ids, new, tok.decode(new, skip_special_tokens=True)
    greedy.tok, greedy.encode = tok, encode
    return greedy


def chat(client, model, messages, **kw):
    return client.chat.completions.create(model=model, messages=messages, temperature=0,
                                          max_tokens=kw.pop("max_tokens", MAX), **kw)


def test_lists_models(client, tiny_run):
    ids = [m.id for m in client.models.list().data]
    assert ids == ["base", tiny_run.name, "zero", "loud", "vox_lang:champion", "vox_lang:challenger"]
    assert client.models.retrieve("vox_lang:champion").root == tiny_run.name


def test_prompt_is_the_training_format(ref):
    """The rung's chat template gives the same ids as mens's training encoding + the header."""
    from mens.data.pack import tokenize_chat
    msgs = vox_prompts(1)[0]
    ids, _ = tokenize_chat(ref.tok, msgs)
    assert ref.encode(msgs) == ids + ref.tok.encode("<|im_start|>assistant\n", add_special_tokens=False)


def test_each_slot_equals_peft_greedy_and_adapter_differs(client, ref, tiny_run):
    differs = 0
    for msgs in vox_prompts(3):
        texts = {}
        for name in ("base", tiny_run.name, "loud"):
            r = chat(client, name, msgs)
            ids, new, text = ref(name, msgs)
            assert r.choices[0].message.content == text, name
            assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == len(new)
            assert r.system_fingerprint == f"mens-{name}"
            texts[name] = text
        differs += texts["base"] != texts[tiny_run.name]
    assert differs >= 1, "the adapter answers every prompt exactly like the base"


def test_zeroed_lora_b_is_exactly_base(client, ref):
    for msgs in vox_prompts(3):
        zero = chat(client, "zero", msgs)
        base = chat(client, "base", msgs)
        assert zero.system_fingerprint == "mens-zero"
        assert zero.choices[0].message.content == base.choices[0].message.content == ref("base", msgs)[2]
        assert zero.usage == base.usage


def test_finish_reason_and_usage(client, ref, tiny_run):
    # a max_tokens cut: "length", exactly max_tokens generated
    msgs = vox_prompts(1)[0]
    ids, new, _ = ref(tiny_run.name, msgs, 8)
    r = chat(client, tiny_run.name, msgs, max_tokens=8)
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == \
        (len(ids), 8, len(ids) + 8)
    # a natural stop (<|im_end|>): "stop"; the end-of-turn token counts as generated
    eos = {4095, 4093}
    found = 0
    for msgs in vox_prompts(8):
        for name in ("base", tiny_run.name):
            ids, new, text = ref(name, msgs, 32)
            if new and new[-1] in eos:
                r = chat(client, name, msgs, max_tokens=32)
                assert r.choices[0].finish_reason == "stop"
                assert r.choices[0].message.content == text
                assert r.usage.completion_tokens == len(new) and r.usage.prompt_tokens == len(ids)
                found += 1
    assert found, "no held-out prompt ends naturally within 32 tokens (reference decoding)"


def test_stop_string_cuts_and_says_stop(client, ref, tiny_run):
    msgs = vox_prompts(1)[0]
    _, _, text = ref(tiny_run.name, msgs)
    stop = text.strip()[2:5]
    assert stop and stop in text
    r = chat(client, tiny_run.name, msgs, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == text[:text.find(stop)]
    # streamed with the same stop string: the same text, the stop string never leaks
    parts = [c.choices[0].delta.content or "" for c in
             chat(client, tiny_run.name, msgs, stop=[stop], stream=True) if c.choices]
    assert "".join(parts) == r.choices[0].message.content


def test_streaming_equals_non_streaming(client, ref, tiny_run):
    msgs = vox_prompts(2)[1]
    for name in ("base", tiny_run.name):
        full = chat(client, name, msgs)
        chunks = list(chat(client, name, msgs, stream=True, stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == full.choices[0].message.content
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == \
            full.choices[0].finish_reason
        assert chunks[-1].usage == full.usage
    # /v1/completions with the chat template rendered by hand: the same answer, streamed or not
    prompt = ref.tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    done = client.completions.create(model=tiny_run.name, prompt=prompt, max_tokens=MAX, temperature=0)
    assert done.choices[0].text == chat(client, tiny_run.name, msgs).choices[0].message.content
    streamed = client.completions.create(model=tiny_run.name, prompt=prompt, max_tokens=MAX,
                                         temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == done.choices[0].text


def test_seeded_sampling_repeats(client):
    msgs = vox_prompts(1)[0]
    a, b = (client.chat.completions.create(model="loud", messages=msgs, max_tokens=12,
                                           temperature=0.9, seed=7) for _ in range(2))
    assert a.choices[0].message.content == b.choices[0].message.content


def test_api_key_is_required(server):
    url = server[0]
    bad = openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.models.list()
    assert e.value.body["code"] == "invalid_api_key"
    r = httpx.post(f"{url}/v1/chat/completions", json={"model": "base"})
    assert r.status_code == 401 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert httpx.get(f"{url}/health").status_code == 200


def test_promote_and_rollback_without_restart(server, client, tiny_run, tmp_path):
    url, proc = server
    port = url.rsplit(":", 1)[1]
    msgs = vox_prompts(1)[0]
    loud = chat(client, "loud", msgs).choices[0].message.content
    mine = chat(client, tiny_run.name, msgs).choices[0].message.content
    assert loud != mine
    assert chat(client, "vox_lang:champion", msgs).choices[0].message.content == mine
    # the CLI: the challenger (loud) becomes champion, the old champion the challenger
    cli = subprocess.run([sys.executable, "-m", "mens.serve", "promote", "vox_lang",
                          f"serve.port={port}", "serve.api_key_env=MENS_TEST_KEY",
                          f"hydra.run.dir={tmp_path / 'admin'}"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "MENS_TEST_KEY": KEY})
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout[cli.stdout.index("{"):]) == \
        {"spoke": "vox_lang", "champion": "loud", "challenger": tiny_run.name}
    r = chat(client, "vox_lang:champion", msgs)
    assert (r.choices[0].message.content, r.system_fingerprint) == (loud, "mens-loud")
    assert chat(client, "vox_lang:challenger", msgs).choices[0].message.content == mine
    # the admin endpoint: roll back; refusals are 4xx in OpenAI's shape
    h = {"authorization": f"Bearer {KEY}"}
    assert httpx.post(f"{url}/admin/rollback", json={"spoke": "vox_lang"}, headers=h).json() == \
        {"spoke": "vox_lang", "champion": tiny_run.name, "challenger": "loud"}
    assert chat(client, "vox_lang:champion", msgs).choices[0].message.content == mine
    assert httpx.post(f"{url}/admin/rollback", json={"spoke": "vox_lang"}, headers=h).status_code == 400
    r = httpx.post(f"{url}/admin/promote", json={"spoke": "vox_lang", "slot": "base"}, headers=h)
    assert r.status_code == 404 and r.json()["error"]["param"] == "slot"
    assert proc.poll() is None   # the same server process throughout


MEMORY_SCRIPT = r"""
import gc, json, sys
import peft, peft.tuners.lora, psutil, safetensors.torch   # library code is not adapter memory
from pathlib import Path
from peft.tuners.lora import LoraLayer
from mens.serve.generate import GenRequest, generate
from mens.run.rundir import RunDir
from mens.serve.slots import Slots, Source

run, k = Path(sys.argv[1]), int(sys.argv[2])
s = Slots(RunDir(run).read_spec()["rung"], [])
ids = tuple(s.encode_chat([{"role": "user", "content": "hello"}]))
generate(s, s.slots["base"], GenRequest(ids, 2, temperature=0)); gc.collect()
rss = [psutil.Process().memory_info().rss]
for i in range(k):
    slot = s.add(Source.parse(f"s{i}={run}"))
    generate(s, slot, GenRequest(ids, 2, temperature=0)); gc.collect()
    rss.append(psutil.Process().memory_info().rss)
lora = [m for m in s.model.modules() if isinstance(m, LoraLayer)]
file_bytes = sum(t.numel() * t.element_size() for t in
                 safetensors.torch.load_file(str(run / "adapter" / "adapter_model.safetensors")).values())
print(json.dumps({"rss": rss, "merged": any(m.merged for m in lora), "file_bytes": file_bytes,
                  "dense_delta_bytes": sum(m.base_layer.weight.numel() * 4 for m in lora),
                  **s.memory()}))
"""


def test_memory_with_k_adapters(tiny_run):
    """k adapters on one base cost their own A/B bytes, not a dense delta each (measured in a
    fresh process: tensor bytes exactly, RSS growth within a small margin)."""
    k = 4
    out = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, str(tiny_run), str(k)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    m = json.loads(out.stdout.strip().splitlines()[-1])
    adapters = list(m["adapter_bytes"].values())
    assert adapters == [m["file_bytes"]] * k          # each slot holds exactly its file's tensors
    assert m["model_tensor_bytes"] == m["base_bytes"] + sum(adapters)
    assert not m["merged"]
    growth = m["rss"][-1] - m["rss"][0]
    margin = 8 * 2**20
    print(f"\nmemory: base {m['base_bytes'] / 2**20:.2f} MiB, {k} adapters "
          f"{sum(adapters) / 2**20:.2f} MiB, RSS growth {growth / 2**20:.2f} MiB "
          f"(a dense delta would be {m['dense_delta_bytes'] / 2**20:.2f} MiB each)")
    assert growth <= sum(adapters) + margin
    assert margin < m["dense_delta_bytes"]            # so the check would catch one dense delta
