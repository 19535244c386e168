"""Distillation's local loss is normalised by the accumulation window's answer tokens (issue #49
item 11), as TRL's trainers divide by the window's `num_items_in_batch`: two micro-batches of
very different answer lengths, each backwarded / grad_accum as Lightning does, give the gradient
of the one batch holding both — not a mean of two per-micro-batch means, which weighs the short
answer's tokens as much as the long one's."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import rl_util

SHORT = ("say hi", "hi")
LONG = ("count", " ".join(str(i) for i in range(1, 40)))


@pytest.fixture(scope="module")
def student():
    from mens.config.compose import compose
    from mens.objective.distill import Distill
    from mens.plan.spec import compile_run

    spec, _ = compile_run(compose(["+hw=cpu", "train.seq_len=256", "train.micro_batch=1",
                                   "train.global_batch=2", "lane=distill",
                                   "lane.distill.teacher=tiny", "lane.distill.lmbda=0.0",
                                   "lane.distill.max_completion_length=8"]), "train")
    model, tok, _, enc = rl_util.student(spec)
    records = [{"id": rid, "messages": [{"role": "user", "content": q},
                                        {"role": "assistant", "content": a}]}
               for rid, (q, a) in (("short", SHORT), ("long", LONG))]
    obj = Distill(spec)        # lmbda 0: every step on the data's own answers (no sampling)
    obj.bind(model, tok, records, enc)
    return obj, model


def grads(model):
    return torch.cat([p.grad.flatten() for n, p in model.named_parameters() if "lora_" in n])


def test_two_micro_batches_give_the_one_batch_gradient(student):
    from mens.objective.base import Step

    obj, model = student
    window = [[("short", False)], [("long", False)]]
    model.zero_grad()
    tokens, logged = [], None
    for pos, rid in enumerate(("short", "long")):
        ctx = Step(None, None, 1, None, model=model, group=(0, 7), accum=2)
        loss, m = obj.step(ctx, {"record_ids": [rid], "window": window, "window_pos": pos})
        (loss / ctx.accum).backward()              # Lightning's division by grad_accum
        logged = m["loss"].item()
    split = grads(model).clone()
    model.zero_grad()
    loss, m = obj.step(Step(None, None, 1, None, model=model, group=(0, 8), accum=1),
                       {"record_ids": ["short", "long"]})
    loss.backward()
    whole = grads(model)
    assert whole.abs().max() > 0
    assert torch.allclose(split, whole, rtol=1e-4, atol=1e-7), \
        (split - whole).abs().max().item() / whole.abs().max().item()
    # the step's logged loss at its last micro-batch is the window's token mean
    assert logged == pytest.approx(m["loss"].item(), rel=1e-4)


def test_the_answers_differ_enough_for_the_test_to_tell(student):
    """The check above can fail: the two answers' token counts differ several-fold, so a mean
    of the two micro-batches' means is another gradient."""
    from mens.data.formats import turns

    obj, _ = student
    lens = [sum(x != -100 for x in obj.encoder.encode(turns(obj.records[rid]), 256)[1])
            for rid in ("short", "long")]
    assert lens[1] > 4 * lens[0], lens
