"""lane.grpo.generation=server against a real mens server on 127.0.0.1 (issue #39), over a LoRA
policy whose B matrices are random (so the adapter really changes the answers), and its
rollouts are compared with in-process sampling (mens.objective.sampling.generate) on the same
weights: the same tokens, and per-token log-probs whose importance ratio is 1 within 1e-3.
After a simulated optimizer step the adapter is reloaded (timed, printed) and the server
answers from the new weights."""
from __future__ import annotations

import math

import httpx
import pytest
import torch

from serve_util import serving, vox_prompts

T = 16


@pytest.fixture(scope="module")
def policy():
    """The trainer's policy (the run's own model loading), a real server on 127.0.0.1 — mens's
    app on uvicorn in a thread, over the same base — named by lane.grpo.server_url, as a user's
    server is. (The server the run starts itself, a subprocess: the slow test beside this one.)"""
    from mens.config.compose import compose
    from mens.model.load import load_model
    from mens.objective.rollout_server import RolloutServer
    from mens.plan.spec import compile_run
    from mens.serve.openai_api import build_app
    from mens.serve.slots import Slots

    def spec_for(*more):
        return compile_run(compose(["+hw=cpu", "lane=grpo", "train.seq_len=256", *more]),
                           "plan")[0]
    spec = spec_for()
    model, tok = load_model(spec)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    slots = Slots(spec.rung, [], device="cpu", dtype="fp32", seed=spec.train.seed)
    with serving(build_app(slots, runtime_lora=True)) as url:
        spec = spec_for("lane.grpo.generation=server", f"lane.grpo.server_url={url}")
        server = RolloutServer.start(spec, model)
        try:
            yield spec, model, tok, server
        finally:
            server.close()
            slots.close()


def same_rows(a, b) -> bool:
    rows = lambda r: [row[:n].tolist() for row, n in zip(r.completion_ids, r.lengths)]  # noqa: E731
    return rows(a) == rows(b)


def ratio_range(roll, model, temperature: float) -> tuple[float, float]:
    from mens.objective.sampling import completion_logps

    with torch.no_grad():
        mine = completion_logps(model, roll.input_ids, roll.attention_mask, roll.completion_mask,
                                temperature)
    m = roll.completion_mask.bool()
    r = torch.exp(mine - roll.sampling_logps)[m]
    return r.min().item(), r.max().item()


def test_greedy_rollouts_equal_in_process_ones(policy):
    from mens.objective.sampling import generate

    spec, model, tok, server = policy
    prompts = vox_prompts(4)
    theirs = server.generate(model, tok, prompts, 1, T, greedy=True)
    ours = generate(model, tok, prompts, 1, T, greedy=True)
    assert theirs.texts == ours.texts and theirs.lengths == ours.lengths
    assert same_rows(theirs, ours) and theirs.eos == ours.eos
    assert torch.equal(theirs.prompt_ids, ours.prompt_ids)
    lo, hi = ratio_range(theirs, model, 1.0)
    print(f"\ngreedy: {sum(theirs.lengths)} tokens equal; importance ratio in [{lo:.7f}, {hi:.7f}]")
    assert 1 - 1e-3 <= lo <= hi <= 1 + 1e-3


def test_sampled_group_matches_and_its_ratios_are_one(policy):
    from mens.objective.rollout_server import importance
    from mens.objective.sampling import generate

    spec, model, tok, server = policy
    prompts, G = vox_prompts(2), 4
    theirs = server.generate(model, tok, prompts, G, T, temperature=1.0, seed=7)
    ours = generate(model, tok, prompts, G, T, temperature=1.0, seed=7)
    assert len(theirs.texts) == 2 * G
    # one seeded batch of the same shape on the same weights: the same draws
    assert same_rows(theirs, ours) and theirs.texts == ours.texts
    lo, hi = ratio_range(theirs, model, 1.0)
    print(f"\nsampled (G={G}, T=1.0): importance ratio in [{lo:.7f}, {hi:.7f}]")
    assert 1 - 1e-3 <= lo <= hi <= 1 + 1e-3
    from mens.objective.sampling import completion_logps
    logps = completion_logps(model, theirs.input_ids, theirs.attention_mask,
                             theirs.completion_mask, 1.0)
    w, metrics = importance(theirs, logps, theirs.completion_mask, spec.lane.grpo)
    assert w.shape == (2 * G, 1)                      # TRL's default: sequence_mask
    assert (w - 1).abs().max().item() < 1e-3
    assert metrics["sampling/sampling_logp_difference/max"].item() < 1e-3


def test_an_optimizer_step_reloads_the_adapter(policy):
    from mens.objective.sampling import generate

    spec, model, tok, server = policy
    prompts = vox_prompts(2)
    before = server.generate(model, tok, prompts, 1, T, greedy=True)
    assert math.isnan(before.reload_s)                # nothing changed: nothing reloaded
    old = server.name
    times = []
    for step in range(2):                             # as an optimizer step moves the adapter
        with torch.no_grad():
            for n, p in model.named_parameters():
                if p.requires_grad:
                    p.add_(torch.randn_like(p) * 0.05)
        after = server.generate(model, tok, prompts, 1, T, greedy=True)
        times.append(after.reload_s)
        assert same_rows(after, generate(model, tok, prompts, 1, T, greedy=True))
        lo, hi = ratio_range(after, model, 1.0)
        assert 1 - 1e-3 <= lo <= hi <= 1 + 1e-3
    print(f"\nadapter reload (save + load + unload), tiny rung: "
          f"{', '.join(f'{t * 1000:.0f} ms' for t in times)}")
    assert all(t > 0 for t in times)
    served = [m["id"] for m in httpx.get(f"{server.url}/v1/models").json()["data"]]
    assert server.name in served and old not in served          # the old one is unloaded
    assert sum(m.startswith("policy-") for m in served) == 1


def test_importance_weights_follow_trls_modes(policy):
    """ρ = exp(trainer − server) per token or summed per sequence; truncated at C_max or
    masked to 0 above it (TRL 1.16's four vllm_importance_sampling_mode values)."""
    from types import SimpleNamespace

    from mens.objective.rollout_server import importance

    logps = torch.tensor([[-1.0, -2.0, 0.0], [-1.0, -1.0, -1.0]])
    server = torch.tensor([[-1.5, -2.0, 0.0], [-3.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    roll = SimpleNamespace(sampling_logps=server, reload_s=0.1, generate_s=0.2)

    def w(mode):
        g = SimpleNamespace(importance_sampling_mode=mode, importance_sampling_clip_max=3.0)
        return importance(roll, logps, mask, g)[0]
    e = math.exp
    assert torch.allclose(w("token_truncate"), torch.tensor([[e(.5), 1, 1], [3.0, 1, 1]]))
    assert torch.allclose(w("token_mask"), torch.tensor([[e(.5), 1, 1], [0.0, 1, 1]]))
    assert torch.allclose(w("sequence_truncate"), torch.tensor([[e(.5)], [3.0]]))
    assert torch.allclose(w("sequence_mask"), torch.tensor([[e(.5)], [0.0]]))
    assert importance(SimpleNamespace(), logps, mask, None) == (None, {})   # in-process rollout


def test_what_cannot_generate_through_a_server_is_refused():
    """The full lane has no adapter to ship; a server_url where nothing answers is named."""
    from mens.config.compose import compose
    from mens.errors import ConfigError
    from mens.objective.rollout_server import RolloutServer
    from mens.plan.spec import compile_run
    import socket

    full = compile_run(compose(["+hw=cpu", "lane=grpo", "lane.method=full",
                                "lane.grpo.generation=server"]), "plan")[0]
    with pytest.raises(ConfigError) as e:
        RolloutServer.start(full, model=None)
    assert e.value.key == "lane.grpo.generation" and "lane.method=lora" in e.value.message
    sock = socket.socket()                      # a port held, never listened on: refused
    sock.bind(("127.0.0.1", 0))
    try:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        spec = compile_run(compose(["+hw=cpu", "lane=grpo", "lane.grpo.generation=server",
                                    f"lane.grpo.server_url={url}"]), "plan")[0]
        with pytest.raises(ConfigError) as e:
            RolloutServer.start(spec, model=None)
        assert e.value.key == "lane.grpo.server_url" and url in e.value.message
    finally:
        sock.close()
