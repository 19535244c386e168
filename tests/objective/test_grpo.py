"""GRPO's pieces against TRL's own GRPOTrainer (the installed TRL, imported once): the
advantages its `_generate_and_score_completions` computes from the same rewards, and the loss,
gradients and metrics its `_compute_loss` gives on the same rollout and the same tiny model,
for each loss type; sampling on the tiny rung with its masks."""
from __future__ import annotations

import math

import pytest
import torch

from mens.objective.grpo import (completion_logps, end_ids, generate, group_advantages,
                                 grpo_loss)

G = 4
PROMPTS = [[{"role": "system", "content": "You are a careful Bash expert."},
            {"role": "user", "content": "list the files here as JSON"}],
           [{"role": "user", "content": "count the lines of a.txt"}],
           [{"role": "user", "content": "write a Vox function that adds two numbers"}]]
TEMPERATURE = 0.9          # ≠ 1, so the logits' division by it is checked too
REL, GRAD = 1e-5, 1e-4     # the tolerances: loss value (relative), gradients


@pytest.fixture(scope="module")
def tiny():
    from mens.config.compose import compose
    from mens.model.load import load_base, load_tokenizer

    rung = compose(["+rung=tiny", "+hw=cpu"]).rung
    return load_base(rung), load_tokenizer(rung)


@pytest.fixture(scope="module")
def trainer(tiny, tmp_path_factory):
    """TRL's GRPOTrainer on the tiny model; its reward function hands out `trainer.queued`."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, tok = tiny
    queued: list = []

    def queued_reward(completions, **_):
        return [queued.pop(0) for _ in completions]
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("trl")), use_cpu=True,
                      report_to=[], save_strategy="no", per_device_train_batch_size=len(PROMPTS) * G,
                      num_generations=G, max_completion_length=12, temperature=TEMPERATURE,
                      beta=0.1, epsilon=0.2, epsilon_high=0.28, seed=0,
                      bf16=False)   # TRL 1.x defaults to bf16 autocast even on CPU; mens's CPU lanes are fp32
    tr = GRPOTrainer(model=model, reward_funcs=queued_reward, args=args, processing_class=tok,
                     train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS]))
    tr.queued = queued
    return tr


def trl_rollout(tr, rewards: list):
    tr.queued[:] = [None if math.isnan(r) else r for r in rewards]   # None: TRL's unscorable
    tr.model.train()
    return tr._generate_and_score_completions([{"prompt": p} for p in PROMPTS for _ in range(G)])


def seeded_rewards() -> list[float]:
    g = torch.Generator().manual_seed(1)
    r = torch.rand(len(PROMPTS) * G, generator=g).round(decimals=1)
    r[G:2 * G] = 0.5            # a group with one reward (std 0: advantages 0, not NaN)
    r[2 * G + 1] = math.nan     # an unverified answer: left out of its group, advantage 0
    return r.tolist()


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_advantages_equal_trls(trainer, scale):
    rewards = seeded_rewards()
    trainer.scale_rewards = scale
    out = trl_rollout(trainer, rewards)
    ours = group_advantages(torch.tensor(rewards), G, scale)
    torch.testing.assert_close(ours, out["advantages"], rtol=REL, atol=1e-7)
    assert ours[2 * G + 1] == 0 and (ours[G:2 * G] == 0).all() and ours.abs().sum() > 0.5


@pytest.fixture(scope="module")
def batch(trainer):
    """A real TRL rollout (its prompts, samples, masks), with seeded advantages, sampler and
    reference log-probs far enough from the policy's that many ratios leave [1-ε_low, 1+ε_high]
    and the KL term is large; completion masks cut at seeded lengths."""
    trainer.scale_rewards = "group"
    out = trl_rollout(trainer, seeded_rewards())
    g = torch.Generator().manual_seed(2)
    n, t = out["completion_ids"].shape
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).long()                     # (N, T)
    model = trainer.model
    with torch.no_grad():
        logps = completion_logps(model, torch.cat([out["prompt_ids"], out["completion_ids"]], 1),
                                 torch.cat([out["prompt_mask"], mask], 1), mask, TEMPERATURE)
    return {"prompt_ids": out["prompt_ids"], "prompt_mask": out["prompt_mask"],
            "completion_ids": out["completion_ids"], "completion_mask": mask,
            "advantages": torch.randn(n, generator=g),
            "old_per_token_logps": (logps + 0.3 * torch.randn(n, t, generator=g)) * mask,
            "ref_per_token_logps": (logps + 0.5 * torch.randn(n, t, generator=g)) * mask,
            "num_items_in_batch": mask.sum()}


def trl_loss(tr, inputs, loss_type, beta, bias_kl=True):
    tr.loss_type, tr.beta, tr.args.use_bias_correction_kl = loss_type, beta, bias_kl
    tr.current_gradient_accumulation_steps = 1     # what Trainer sets per optimizer step
    tr._metrics["train"].clear()
    tr.model.zero_grad()
    loss = tr._compute_loss(tr.model, dict(inputs))
    loss.backward()
    return loss.item(), grads(tr.model), {k: v[-1] for k, v in tr._metrics["train"].items()}


def our_loss(model, inputs, loss_type, beta, bias_kl=True, epsilon_low=0.2, epsilon_high=0.28):
    model.zero_grad()
    mask = inputs["completion_mask"]
    logps = completion_logps(model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
                             torch.cat([inputs["prompt_mask"], mask], 1), mask, TEMPERATURE)
    loss, metrics = grpo_loss(logps, inputs["old_per_token_logps"],
                              inputs["ref_per_token_logps"] if beta else None,
                              inputs["advantages"], mask, beta, epsilon_low, epsilon_high,
                              loss_type, max_completion_length=12,
                              num_items=inputs["num_items_in_batch"], bias_correction_kl=bias_kl)
    loss.backward()
    return loss.item(), grads(model), metrics


def grads(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def assert_same(ours, theirs):
    (lo, go, mo), (lt, gt, mt) = ours, theirs
    assert lo == pytest.approx(lt, rel=REL), (lo, lt)
    assert go.shape == gt.shape and (gt.abs().max() > 0)
    assert (go - gt).abs().max() <= GRAD * gt.abs().max(), (go - gt).abs().max()
    for key in ("kl", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"):
        if key in mt:
            assert mo[key] == pytest.approx(mt[key], rel=1e-4, abs=1e-7), key


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_loss_and_gradients_equal_trls(trainer, batch, loss_type):
    theirs = trl_loss(trainer, batch, loss_type, beta=0.1)
    ours = our_loss(trainer.model, batch, loss_type, beta=0.1)
    assert_same(ours, theirs)
    # the batch exercises what is compared: tokens clipped on both sides, a KL term that counts
    assert ours[2]["clip_ratio/low_mean"] > 0.05 and ours[2]["clip_ratio/high_mean"] > 0.05
    assert ours[2]["kl"] > 0.05


def test_no_reference_and_the_plain_kl_equal_trls(trainer, batch):
    assert_same(our_loss(trainer.model, batch, "dapo", beta=0.0),
                trl_loss(trainer, batch, "dapo", beta=0.0))
    assert_same(our_loss(trainer.model, batch, "grpo", beta=0.1, bias_kl=False),
                trl_loss(trainer, batch, "grpo", beta=0.1, bias_kl=False))


@pytest.mark.parametrize("change", ["no KL term", "KL without the ratio", "no clipping",
                                    "symmetric clipping"])
def test_the_comparison_catches_an_altered_kl_or_clip(trainer, batch, change):
    """The same comparison fails when our KL term or clipping is changed: the tolerances are far
    below what either contributes on this batch."""
    theirs = trl_loss(trainer, batch, "grpo", beta=0.1)
    kw = {"no KL term": {"beta": 0.0}, "KL without the ratio": {"bias_kl": False},
          "no clipping": {"epsilon_low": 1e9, "epsilon_high": 1e9},
          "symmetric clipping": {"epsilon_high": 0.2}}[change]
    altered = our_loss(trainer.model, batch, "grpo", **{"beta": 0.1, **kw})
    with pytest.raises(AssertionError):
        assert_same(altered, theirs)


def test_generate_gives_G_masked_samples_per_prompt(tiny):
    model, tok = tiny
    eos, pad = end_ids(model, tok), tok.pad_token_id
    r = generate(model, tok, PROMPTS, G=G, max_new_tokens=24, temperature=1.0, seed=0)
    n, P = r.prompt_ids.shape
    assert n == len(PROMPTS) * G and r.completion_ids.shape == r.completion_mask.shape
    assert r.input_ids.shape == (n, P + r.completion_ids.shape[1])
    for i in range(n):
        p, first = PROMPTS[i // G], r.prompt_ids[i // G * G]
        assert torch.equal(r.prompt_ids[i], first)                   # a group shares its prompt
        k = int(r.prompt_mask[i].sum())
        assert r.prompt_mask[i, :P - k].sum() == 0                   # left padding
        assert (r.prompt_ids[i, :P - k] == pad).all()
        assert tok.decode(r.prompt_ids[i, P - k:]) == tok.apply_chat_template(
            p, add_generation_prompt=True, tokenize=False)
        row, m, L = r.completion_ids[i], r.completion_mask[i], r.lengths[i]
        assert m[:L].all() and not m[L:].any() and (row[L:] == pad).all()   # right padding
        ends = [j for j in range(L) if int(row[j]) in eos]
        assert ends == ([L - 1] if r.eos[i] else [])                 # mask keeps the end token
        assert r.eos[i] or L == r.completion_ids.shape[1]            # else cut at max_new
        assert r.texts[i] == tok.decode(row[:L - r.eos[i]], skip_special_tokens=True)
    assert any(r.eos) and not all(r.eos), r.eos    # both kinds of row occur in this seeded sample
    again = generate(model, tok, PROMPTS, G=G, max_new_tokens=24, temperature=1.0, seed=0)
    assert again.texts == r.texts                                    # seeded
    assert generate(model, tok, PROMPTS, G=G, max_new_tokens=24, seed=1).texts != r.texts
