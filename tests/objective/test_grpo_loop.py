"""Issue #39's acceptance for the loop: one optimizer step of GRPO gives the same gradient
whether its prompts are split micro 4 × accum 1, micro 1 × accum 4, or over 2 processes × accum 2
(a real 2-process gloo group on 127.0.0.1), for every loss type and for scale_rewards=batch —
on FIXED rollouts and rewards, so only the loss's normalisation is under test.

The fixed rollout is a real sample of the tiny rung (mens.objective.sampling.generate) with
seeded rewards; Grpo.rollout and Grpo.score (the objective's two hooks for sampling and
judging) hand out its rows instead of sampling. The step is driven as Lightning drives it:
each micro-batch's loss is divided by the accumulation and backwarded, and with 2 processes the
gradients are averaged over ranks as DDP does. A third case puts 3 prompts on 2 ranks: rank 1's
second prompt is a repeat (strategy.Repeat), which must add nothing.

Before issue #39 each micro-batch normalised by its own tokens (dapo) and batch-scaled rewards
by one rank's std: micro 1 × accum 4 differed from micro 4 by far more than the tolerance."""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
import torch

G, T, TOL = 4, 12, 1e-5
# every loss type once, scale_rewards=batch on two of them (each case costs a few seconds)
CASES = ["dapo/group", "bnpo/batch", "grpo/group", "dr_grpo/batch"]

WORKER = r'''
import json, math, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

G, T = 4, 12
CASES = json.loads(sys.argv[3])
PROMPTS = [[{"role": "user", "content": c}] for c in
           ("list the files here", "count the lines of a.txt", "print the date",
            "show the disk usage")]


def objective(loss_type, scale, model):
    from mens.objective.grpo import Grpo
    from mens.objective.rewards import Rewards

    spec = SPEC                 # composed once, before the fork
    spec.lane.grpo.loss_type, spec.lane.grpo.scale_rewards = loss_type, scale

    class Fixed(Grpo):
        """The fixed rollout's rows of the asked prompts, its seeded rewards: no sampling."""
        def rows(self, heads):
            idx = [PROMPTS.index(h) for h in heads]
            return [i * G + j for i in idx for j in range(G)]

        def rollout(self, model, heads, G_, T_, tools):
            r, rows = fixed["roll"], self.rows(heads)
            from mens.objective.sampling import Rollout
            return Rollout(r.prompt_ids[rows], r.prompt_mask[rows], r.completion_ids[rows],
                           r.completion_mask[rows], [r.texts[i] for i in rows],
                           [r.lengths[i] for i in rows], [r.eos[i] for i in rows], G)

        def score(self, recs, heads, texts, G_):
            total = [fixed["rewards"][i] for i in self.rows(heads)]
            return Rewards(total, list(total), None, None, {})
    obj = Fixed(spec)
    recs = [{"id": str(i), "messages": p} for i, p in enumerate(PROMPTS)]
    obj.bind(model, None, recs)
    g = torch.Generator().manual_seed(3)      # a reference apart from the policy: KL counts
    with torch.no_grad():
        for p in obj.ref_model.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))
    return obj


def window(obj, model, micro, accum, world, rank, all_sum, all_max):
    """One optimizer step as Lightning + DDP run it: loss / accum backwarded per micro-batch,
    gradients averaged over ranks. micro: this rank's micro-batches of (prompt, is_repeat)."""
    from mens.objective.base import Step

    model.zero_grad()
    win = [[(str(i), rep) for i, rep in mb] for mb in micro]
    for pos, mb in enumerate(win):
        ctx = Step(logps=None, lm_loss=None, world=world, all_sum=all_sum, model=model,
                   group=(0, 0), rank=rank, all_max=all_max, accum=accum)
        batch = {"record_ids": [i for i, _ in mb], "window": win, "window_pos": pos}
        loss, metrics = obj.step(ctx, batch)
        (loss / accum).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    if world > 1:
        dist.all_reduce(grads)
        grads /= world
    return grads, {k: float(v) for k, v in metrics.items()}


def model_of():
    return torch.load(sys.argv[2] + ".model", weights_only=False).train()


def run(rank, port, out):
    from mens.train.module import all_max
    from mens.train.strategy import all_sum

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    model, got = model_of(), {}
    for loss_type, scale in CASES:
        obj = objective(loss_type, scale, model)
        # 4 prompts: rank r takes prompts r, r+2 (strategy.rank_items), accum 2, micro 1
        g4, m4 = window(obj, model, [[(rank, False)], [(rank + 2, False)]], 2, 2, rank,
                        all_sum, all_max)
        obj = objective(loss_type, scale, model)
        # 3 prompts: rank 0 takes 0, 2; rank 1 takes 1 and a repeat of 0 (DistributedSampler)
        last = (2, False) if rank == 0 else (0, True)
        g3, m3 = window(obj, model, [[(rank, False)], [last]], 2, 2, rank, all_sum, all_max)
        got[f"{loss_type}/{scale}"] = {"ranks4": g4, "ranks3": g3,
                                       "m4": m4, "m3": m3}
        if rank == 0:   # one process, the same prompts, as the issue names the splits
            for name, micro, accum in (("micro4", [[(i, False) for i in range(4)]], 1),
                                       ("accum4", [[(i, False)] for i in range(4)], 4),
                                       ("micro3", [[(i, False) for i in range(3)]], 1)):
                obj = objective(loss_type, scale, model)
                g, m = window(obj, model, micro, accum, 1, 0, lambda t: t, None)
                got[f"{loss_type}/{scale}"][name], got[f"{loss_type}/{scale}"]["m" + name] = g, m
    torch.save(got, f"{out}.{rank}")
    dist.destroy_process_group()


if __name__ == "__main__":
    import mens.objective.grpo, mens.train.module   # imported once: fork shares them
    from mens.config.compose import compose
    SPEC = compose(["lane=grpo", "lane.method=full", "train.seq_len=256",
                    f"lane.grpo.num_generations={G}", f"lane.grpo.max_completion_length={T}",
                    "lane.grpo.beta=0.1", "lane.grpo.temperature=0.9",
                    "lane.grpo.epsilon_high=0.28"])
    fixed = torch.load(sys.argv[2] + ".roll", weights_only=False)
    mp.start_processes(run, args=(int(sys.argv[1]), sys.argv[2]), nprocs=2, start_method="fork")
'''

PROMPTS = [[{"role": "user", "content": c}] for c in
           ("list the files here", "count the lines of a.txt", "print the date",
            "show the disk usage")]


@pytest.fixture(scope="module")
def tiny():
    from mens.config.compose import compose
    from mens.model.load import load_base, load_tokenizer

    rung = compose(["+rung=tiny", "+hw=cpu"]).rung
    return load_base(rung), load_tokenizer(rung)


@pytest.fixture(scope="module")
def results(tiny, tmp_path_factory):
    from mens.objective.sampling import generate

    tmp = tmp_path_factory.mktemp("grpo_loop")
    model, tok = tiny
    roll = generate(model, tok, PROMPTS, G, T, temperature=0.9, seed=0)
    g = torch.Generator().manual_seed(1)
    # rows cut at seeded lengths (the mask is what the loss reads), so the normalisers differ
    lengths = torch.randint(1, T + 1, (len(PROMPTS) * G,), generator=g)
    roll.completion_mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    roll.lengths = lengths.tolist()
    rewards = torch.rand(len(PROMPTS) * G, generator=g).round(decimals=1).tolist()
    rewards[G:2 * G] = [0.5] * G            # a group with one reward: no signal
    base = str(tmp / "fixed")
    torch.save({"roll": roll, "rewards": rewards}, base + ".roll")
    torch.save(model, base + ".model")         # the whole module: no second load_base
    assert len(set(roll.lengths)) > 4
    cases = [c.split("/") for c in CASES]
    script = tmp / "worker.py"
    script.write_text(WORKER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.run([sys.executable, str(script), str(port), base, json.dumps(cases)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return [torch.load(f"{base}.{r}") for r in (0, 1)]


def close(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("case", CASES)
def test_the_same_gradient_however_the_step_is_split(results, case):
    r0, r1 = results[0][case], results[1][case]
    assert r0["micro4"].abs().max() > 0
    assert torch.equal(r0["ranks4"], r1["ranks4"])                    # DDP: one gradient on both ranks
    assert close(r0["accum4"], r0["micro4"]) < TOL, close(r0["accum4"], r0["micro4"])
    assert close(r0["ranks4"], r0["micro4"]) < TOL, close(r0["ranks4"], r0["micro4"])
    # a rank's repeated prompt is neither trained nor counted: 3 prompts on 2 ranks = 3 on one
    assert close(r0["ranks3"], r0["micro3"]) < TOL, close(r0["ranks3"], r0["micro3"])
    assert r1["m3"]["prompts/repeated"] == 1 and r0["m3"]["prompts/repeated"] == 0
    # the step's logged numbers are the window's on every split
    for k in ("loss", "reward", "reward_std", "frac_reward_zero_std", "kl", "entropy",
              "completions/mean_length", "completions/max_length", "clip_ratio/region_mean"):
        for split in ("maccum4", "m4"):
            assert r0[split][k] == pytest.approx(r0["mmicro4"][k], rel=1e-5, abs=1e-7), (split, k)
        assert r0["m3"][k] == pytest.approx(r0["mmicro3"][k], rel=1e-5, abs=1e-7), k
    assert r0["mmicro4"]["frac_reward_zero_std"] == 0.25    # one group of four has one reward


def test_sampling_advances_the_objectives_rng_and_leaves_the_global_one(tiny):
    """Issue #39: the sampling RNG is the objective's own generator (saved in checkpoints:
    test_grpo_loop_resume.py), advanced by sampling; torch.manual_seed is never called."""
    from mens.objective.sampling import generate, sampling_rng

    model, tok = tiny
    ask = [[{"role": "user", "content": "list the files"}]]
    torch.manual_seed(5)
    rng = sampling_rng(0, "cpu")
    first = generate(model, tok, ask, 4, 8, rng=rng).texts
    assert torch.equal(torch.get_rng_state(), torch.manual_seed(5).get_state())  # untouched
    second = generate(model, tok, ask, 4, 8, rng=rng).texts
    assert first != second                                    # the generator moved on
    again = sampling_rng(0, "cpu")
    assert generate(model, tok, ask, 4, 8, rng=again).texts == first
    assert generate(model, tok, ask, 4, 8, rng=again).texts == second
