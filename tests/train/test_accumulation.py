"""Token-weighted gradient accumulation (issue #25): an optimizer step's loss is the summed NLL of
every micro-batch of its accumulation group over all of their supervised tokens, so the same rows
give the same step whatever the split — 4×1, 2×2 and 1×4 (micro_batch × grad_accum) train the
same curve and the same adapter. Packed rows of the tiny default carry unequal numbers of
supervised tokens (checked below), which is what made a mean of per-micro-batch means differ.

Real tiny trainings (Lightning Trainer, LoRA, the chunked loss), in process, with plain SGD: its
update is linear in the gradient, so equal gradients give equal adapters to float precision
(AdamW's first steps move each weight by ~lr·sign(g) and turn float noise in a near-zero
gradient into a visible difference, ~4e-5 at lr 1e-3 here, that says nothing about weighting)."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from train_util import FAST_TRAIN
from mens.train.datamodule import Position, SkipBatches, supervised_tokens
from mens.run.telemetry import read

SPLITS = [(4, 1), (2, 2), (1, 4)]


def _train(tmp_path_factory, micro: int, accum: int):
    from mens.config.compose import compose
    from mens.plan.output import plan_run
    from mens.train.run import train_run

    out = tmp_path_factory.mktemp(f"accum_{micro}x{accum}")
    overrides = [o for o in FAST_TRAIN if not o.startswith("train.micro_batch")]
    cfg = compose([*overrides, f"train.micro_batch={micro}", f"train.grad_accum={accum}",
                   "train.global_batch=4", "train.max_steps=3", "lane.optimizer.name=sgd",
                   "lane.optimizer.lr=5e-2",
                   "train.eval_every=0"])
    spec, plan = plan_run(cfg, out, "train")
    assert (spec.train.micro_batch, spec.train.grad_accum) == (micro, accum)
    train_run(spec, plan, out)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {s: _train(tmp_path_factory, *s) for s in SPLITS}


def _steps(run):
    return [r for r in read(run / "telemetry.jsonl") if r["event"] == "TRAIN_STEP"]


@pytest.mark.slow   # in `make test-slow` (CI runs it): keeps `make test` near 20 min
def test_every_split_trains_the_same_curve(runs):
    ref = _steps(runs[(4, 1)])
    assert [r["step"] for r in ref] == [1, 2, 3]
    for split in SPLITS[1:]:
        rows = _steps(runs[split])
        assert [r["step"] for r in rows] == [1, 2, 3], split
        for a, b in zip(ref, rows):
            assert abs(a["loss"] - b["loss"]) <= 1e-5, (split, a["step"], a["loss"], b["loss"])
            assert a["valid_tokens"] == b["valid_tokens"], split   # the same rows per step


@pytest.mark.slow   # in `make test-slow` (CI runs it): keeps `make test` near 20 min
def test_every_split_ends_with_the_same_adapter(runs):
    ref = load_file(runs[(4, 1)] / "adapter" / "adapter_model.safetensors")
    for split in SPLITS[1:]:
        got = load_file(runs[split] / "adapter" / "adapter_model.safetensors")
        assert got.keys() == ref.keys()
        worst = max((got[k] - ref[k]).abs().max().item() for k in ref)
        assert worst <= 1e-5, (split, worst)
    # the adapter moved (LoRA's B starts at 0) far more than the tolerance
    assert max(ref[k].abs().max().item() for k in ref if "lora_B" in k) > 1e-3


def test_the_loader_tags_each_micro_batch_with_its_steps_tokens(compile_run):
    """The equality above means something only if the micro-batches of a step differ in
    supervised tokens (a mean of means equals the token mean when they are all equal): the
    tiny default's packed rows do, and each batch carries its group's total."""
    from mens.data.corpus import is_pair, load_spoke
    from mens.data.examples import examples_for
    from mens.data.pack import IGNORE
    from mens.model.load import load_tokenizer
    from mens.train.datamodule import MensData

    overrides = [o for o in FAST_TRAIN if not o.startswith("train.micro_batch")]
    spec, _ = compile_run(*overrides, "train.micro_batch=1", "train.grad_accum=4",
                          "train.global_batch=4", purpose="train")
    tok = load_tokenizer(spec.rung)
    records = [r for r in load_spoke(spec.spoke, seed=0)[0] if not is_pair(r)]
    examples, _ = examples_for(records, tok, spec, list(spec.curriculum.phases), False)
    data = MensData(spec, examples, [r for r in records if r["id"] in examples], False, None)
    batches = [b for _, b in zip(range(8), data.train_dataloader())]
    for first in (0, 4):
        group = batches[first:first + 4]
        counts = [int((b["labels"][:, 1:] != IGNORE).sum()) for b in group]
        assert len(set(counts)) > 1, counts                     # unequal supervised tokens
        assert {int(b["step_tokens"]) for b in group} == {sum(counts)}
        assert {int(b["step_group"]) for b in group} == {first // 4}


def test_groups_and_their_tokens_follow_lightnings_accumulation():
    """SkipBatches: 5 batches of 1 at accum 2 → groups 0,0,1,1,2 (the last one short), each
    batch tagged with its group's supervised tokens; a resume after 2 batches keeps them."""
    class Item:
        def __init__(self, n):
            self.labels = [-100] + [1] * n

    items = [Item(n) for n in (3, 5, 7, 11, 13)]
    tokens = [supervised_tokens(x, 64) for x in items]
    assert tokens == [3, 5, 7, 11, 13]
    pos = Position()
    got = list(SkipBatches(5, 1, pos, accum=2, tokens=tokens))
    assert [b[0][1:] for b in got] == [(0, 8), (0, 8), (1, 18), (1, 18), (2, 13)]
    pos.skip = 2
    assert [b[0][1:] for b in SkipBatches(5, 1, pos, accum=2, tokens=tokens)] == \
        [(1, 18), (1, 18), (2, 13)]
    assert supervised_tokens(Item(100), 10) == 9      # within seq_len, labels[1:]


def test_a_micro_batchs_loss_is_its_share_of_the_step_token_mean():
    """The arithmetic the split-equality rests on: NLL_micro · accum / N summed over the group
    and divided by accum (Lightning) is the group's token mean, not the mean of means."""
    nll, toks = torch.tensor([6.0, 30.0]), torch.tensor([3.0, 10.0])
    accum, n = 2, toks.sum()
    lightning_sum = sum(x * accum / n for x in nll) / accum
    assert torch.isclose(lightning_sum, nll.sum() / n)
    assert not torch.isclose(lightning_sum, (nll / toks).mean())
