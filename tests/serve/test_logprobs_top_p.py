"""Log-probs under top-p (issue #49): a token top-p took out of the distribution has log-prob
−inf, which JSON cannot carry (the answer was a 500); it is reported as −9999.0, vLLM's floor,
on chat and completions. And the per-step reading (mens.serve.batch.StepLogprobs) gives the
tokens and log-probs of generate's own processed scores. The tiny base, mens's app on uvicorn on
127.0.0.1 in this process, asked through the official `openai` client and httpx."""
from __future__ import annotations

import math

import httpx
import openai
import pytest
import torch

from serve_util import serving, tiny_slots

FLOOR = -9999.0


@pytest.fixture(scope="module")
def slots():
    with tiny_slots() as s:
        yield s


@pytest.fixture(scope="module")
def url(slots):
    from mens.serve.openai_api import build_app
    with serving(build_app(slots)) as u:
        yield u


def _ok(values) -> bool:
    return all(isinstance(v, float) and math.isfinite(v) and v >= FLOOR for v in values)


def test_top_p_logprobs_answer_json_on_chat_and_completions(url):
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=300)
    r = client.chat.completions.create(
        model="base", messages=[{"role": "user", "content": "fn add("}], n=2, max_tokens=8,
        temperature=1.0, top_p=0.3, seed=7, logprobs=True, top_logprobs=20)
    drawn = [t.logprob for c in r.choices for t in c.logprobs.content]
    tops = [x.logprob for c in r.choices for t in c.logprobs.content for x in t.top_logprobs]
    assert drawn and _ok(drawn) and min(drawn) > FLOOR, drawn    # a drawn token was kept by top-p
    assert _ok(tops) and FLOOR in tops, tops                     # some of the 20 were not

    r = httpx.post(f"{url}/v1/completions", timeout=300, json={
        "model": "base", "prompt": "fn add(", "max_tokens": 8, "top_p": 0.3, "seed": 7,
        "logprobs": 20})
    assert r.status_code == 200, r.text[:300]
    lp = r.json()["choices"][0]["logprobs"]
    tops = [v for step in lp["top_logprobs"] for v in step.values()]
    assert _ok(lp["token_logprobs"]) and min(lp["token_logprobs"]) > FLOOR, lp["token_logprobs"]
    assert _ok(tops) and FLOOR in tops


def test_batch_logprobs_are_those_of_generates_own_scores(slots):
    """Tokens, log-probs and top-k equal what generate's `output_scores` (the processed scores
    it drew from) give for the same seed: temperature and top-p both active."""
    from mens.model import generate as gen
    from mens.serve.batch import generate_batch
    from mens.serve.slots import BASE

    prompt, n, T, temp, top_p = slots.encode("fn add("), 3, 8, 0.7, 0.8

    def reference():
        ids, mask = gen.left_pad([prompt], slots.pad, slots.device)
        config = gen.generation_config(T, slots.eos, slots.pad, sample=True, temperature=temp,
                                       top_p=top_p, n=n, output_scores=True,
                                       return_dict_in_generate=True)
        torch.manual_seed(11)
        with torch.inference_mode():
            out = gen.generate(slots.model, ids, mask, config)
        return out.sequences[:, ids.shape[1]:], torch.stack(out.scores, 1).log_softmax(-1)

    seqs, logp = slots.run(reference).result()
    got = slots.run(lambda: generate_batch(slots, slots.slots[BASE], [prompt], n, T, temp, top_p,
                                           11, (), 3)).result()
    for r, c in enumerate(got):
        k = len(c.token_ids)
        assert c.token_ids == seqs[r, :k].tolist()
        want = logp[r, torch.arange(k), seqs[r, :k]]
        assert torch.allclose(torch.tensor(c.logprobs), want, atol=1e-5)
        v, i = logp[r, :k].topk(3, dim=-1)
        assert [[t for t, _ in step] for step in c.top] == i.tolist()
        assert torch.allclose(torch.tensor([[x for _, x in step] for step in c.top]), v, atol=1e-5)
