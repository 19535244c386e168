"""ORPO, SimPO and KTO train on every method (issue #28): 2 steps each on lora, qlora and full
on the tiny rung with a real Lightning Trainer (mens.train.run.train_run), logging TRL's metric
names; and each objective's step, on a fixed batch, equals its pure loss (checked against TRL in
test_trl_losses.py) fed with log-probs this test computes itself from the model's logits — so
the wrapping (which rows, which tokens, sums or means, the reference) is pinned, not only the
formula."""
from __future__ import annotations

import re

import pytest

from train_util import FAST_TRAIN
from mens.run.telemetry import read

PAIRS = ["spoke=skill_creation"]
FAST = [*FAST_TRAIN, "train.max_steps=2", "train.eval_max_records=2"]
# 9 trainings: each as small as still trains pairs (a step is its forwards; the file ≲ 60 s)
SMALL = ["train.seq_len=128", "train.global_batch=2", "train.micro_batch=2"]
METHODS = ("lora", "qlora", "full")
LOGGED = {"orpo": {"rewards/margins", "nll_loss", "log_odds_ratio", "log_odds_chosen"},
          "simpo": {"rewards/margins", "rewards/accuracies", "logps/chosen"},
          "kto": {"rewards/chosen", "rewards/rejected", "kl", "logps/chosen"}}


def _train(compile_run, out, *overrides):
    from mens.train.run import train_run

    spec, plan = compile_run(*FAST, *overrides, purpose="train")
    return spec, plan, train_run(spec, plan, out)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("objective", ["orpo", "simpo", "kto"])
def test_trains_on_each_method(compile_run, tmp_path, capsys, objective, method):
    data = PAIRS
    if (objective, method) == ("kto", "lora"):   # labeled records as a user writes them
        data = ["data=file", f"data.path={labeled_file(tmp_path / 'labeled.jsonl')}"]
    out = tmp_path / "run"
    spec, plan, summary = _train(compile_run, out, f"lane={objective}",
                                 f"lane.method={method}", *data, *SMALL)
    tmp_path = out
    assert summary["steps"] == 2
    assert (summary["lane"], summary["method"], summary["objective"]) == \
        (f"{method}-{objective}", method, objective)
    assert (tmp_path / ("model" if method == "full" else "adapter")).is_dir()
    steps = [r for r in read(tmp_path / "telemetry.jsonl") if r["event"] == "TRAIN_STEP"]
    assert len(steps) == 2 and LOGGED[objective] <= set(steps[0]) | set(steps[1])
    if objective == "kto":   # step 1 runs on the weights the reference pass scored
        first = steps[0]      # a batch of 2 may hold one kind only: its reward is logged
        reward = first.get("rewards/chosen", first.get("rewards/rejected"))
        assert abs(reward) < 1e-4 and first["kl"] < 1e-4
        err = capsys.readouterr().err
        said = re.search(r"kto reference pass: (\d+) of (\d+) records", err)
        assert said and int(said[1]) == 2 * spec.train.global_batch < int(said[2])
        if data != PAIRS:   # its held-out split: the desirable answers' NLL, said
            assert re.search(r"held-out \S+: \d+ desirable of \d+ labeled records", err)


def labeled_file(path):
    """A user's KTO data: {prompt, completion, label} lines, half of them desirable."""
    import json

    with open(path, "w") as f:
        for i in range(60):
            good = i % 2 == 1
            f.write(json.dumps({"prompt": f"What is {i} plus {i}? Answer briefly.",
                                "completion": str(2 * i) if good else f"{i} is a number, {3 * i}",
                                "label": good}) + "\n")
    return path


# --------------------------------------------- the step on a fixed batch = the pure loss
TOL = 1e-5


def tiny_model(vocab: int, seed: int):
    """A random 2-layer Qwen3 (hidden 64, float32): a fixed batch's forward takes milliseconds."""
    import torch
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.Qwen3Config(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=16,
                                   tie_word_embeddings=False, initializer_range=0.1)
    return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)


def fixed_batch(compile_run, objective: str, *overrides, n: int = 4):
    """(spec, tokenizer, items, batch): the spoke's first n records of the objective's kind,
    through the data stage (mens.data.examples) and the loader's batching (pair_batch)."""
    import transformers

    from mens.data.examples import examples_for
    from mens.data.select import train_records
    from mens.objective.dpo import pair_batch
    from mens.resources import ASSETS

    spec, _ = compile_run(*FAST, f"lane={objective}", *PAIRS, *overrides)
    tok = transformers.AutoTokenizer.from_pretrained(str(ASSETS / "tiny"))
    records = [dict(r, phase=spec.curriculum.phases[0]) for r in train_records(spec)[0][:n]]
    items = list(examples_for(records, tok, spec, list(spec.curriculum.phases), True)[0].values())
    assert len(items) == n
    return spec, tok, records, items, pair_batch(items, spec.train.seq_len)


def token_logps(model, ids, attention):
    """(B, S-1) log p(ids[t] | ids[<t]) from the model's full logits (this test's own path)."""
    import torch.nn.functional as F

    logits = model(input_ids=ids, attention_mask=attention, use_cache=False).logits[:, :-1]
    return F.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None])[..., 0]


def sums(model, batch, rows=slice(None)):
    """(B,) summed log-probs of each row's answer tokens, and (B,) of its every real token."""
    ids, att, lab = (batch[k][rows] for k in ("input_ids", "attention_mask", "labels"))
    lp = token_logps(model, ids, att)                                               # (B, S-1)
    answer = lab[:, 1:] != -100
    return (lp * answer).sum(-1), (lp * (att[:, 1:] == 1)).sum(-1), answer.sum(-1), \
        (att[:, 1:] == 1).sum(-1)


def run_step(objective_cls, spec, model, batch):
    from mens.objective.base import Step
    from mens.train.module import sequence_logps

    chunked = spec.train.loss == "chunked"
    obj = objective_cls(spec)
    ctx = Step(logps=lambda b: sequence_logps(model, b, chunked), lm_loss=None, world=1,
               all_sum=None, model=model)
    return obj, ctx, lambda: obj.step(ctx, dict(batch))


def rel(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs() / b.abs().clamp(min=1e-12))


def same_mean(logged, per_example, scale) -> bool:
    """A logged metric is its per-example values' mean, to the tolerance of the values it is
    made of (a margin is a difference of nearly equal rewards: a relative check on it would
    measure the cancellation)."""
    return abs(float(logged) - float(per_example.mean())) <= TOL * float(scale.abs().max())


def test_orpo_step_is_the_pure_loss_on_independent_logps(compile_run):
    from mens.objective.orpo import Orpo, orpo_losses

    spec, tok, _, _, batch = fixed_batch(compile_run, "orpo", "lane.orpo.beta=0.3")
    model = tiny_model(len(tok), 0)
    _, _, step = run_step(Orpo, spec, model, batch)
    loss, logged = step()
    n = batch["input_ids"].shape[0] // 2
    answer, every, n_answer, n_every = sums(model, batch)
    mean = answer / n_answer                                             # (2n,) per-row means
    nll = -every[:n].sum() / n_every[:n].sum()    # TRL: prompt + answer of the chosen rows
    want, _ = orpo_losses(mean[:n], mean[n:], nll, 0.3)
    assert rel(loss, want) < TOL and rel(logged["loss"], want) < TOL
    # the NLL's span is seen: the chosen answers' NLL alone gives another loss (a random
    # model's NLL is near log V on every token, so the gap is small, but 10× the tolerance)
    answer_only, _ = orpo_losses(mean[:n], mean[n:], -answer[:n].sum() / n_answer[:n].sum(), 0.3)
    assert rel(answer_only, want) > 10 * TOL
    loss.backward()                                                          # a trainable loss
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_simpo_step_is_the_pure_loss_on_independent_logps(compile_run):
    from mens.objective.simpo import Simpo, simpo_losses

    spec, tok, _, _, batch = fixed_batch(compile_run, "simpo", "lane.simpo.beta=2.5",
                                         "lane.simpo.gamma_beta_ratio=0.4")
    model = tiny_model(len(tok), 0)
    _, _, step = run_step(Simpo, spec, model, batch)
    loss, logged = step()
    n = batch["input_ids"].shape[0] // 2
    answer, _, n_answer, _ = sums(model, batch)
    mean = answer / n_answer
    want, metrics = simpo_losses(mean[:n], mean[n:], 2.5, 0.4)
    assert rel(loss, want) < TOL
    assert same_mean(logged["rewards/margins"], metrics["rewards/margins"],
                     metrics["rewards/chosen"])
    summed, _ = simpo_losses(answer[:n], answer[n:], 2.5, 0.4)   # sums, not means: differs
    assert rel(summed, want) > 1e-3


def test_kto_step_is_the_pure_loss_on_independent_logps(compile_run):
    import torch

    from mens.data.examples import mismatched
    from mens.objective.kto import Kto, kto_kl, kto_losses
    from mens.train.module import reference_scorer

    spec, tok, records, items, batch = fixed_batch(
        compile_run, "kto", "lane.kto.beta=0.5", "lane.kto.undesirable_weight=1.3")
    labels = torch.tensor([it[3] for it in items])
    assert labels.any() and (~labels).any()          # both kinds in the batch
    # the KL row: the record's prompt with the completion before it in its batch (TRL's roll)
    kl_of = mismatched(records, spec.train.micro_batch)
    for i, r in enumerate(records):
        assert kl_of[r["id"]] == records[i - 1]["completion"]
    policy, reference = tiny_model(len(tok), 1), tiny_model(len(tok), 2)
    obj, _, step = run_step(Kto, spec, policy, batch)
    score = reference_scorer(reference, spec)
    obj.prepare(score, items, None)                # the reference pass, on other weights
    loss, logged = step()
    n = len(items)
    with torch.no_grad():
        pol, _, _, _ = sums(policy, batch)
        ref, _, _, _ = sums(reference, batch)
    kl = kto_kl(pol[n:], ref[n:])
    want, metrics = kto_losses(pol[:n], ref[:n], labels, kl, 0.5, 1.0, 1.3)
    assert rel(loss, want) < TOL
    assert abs(float(logged["kl"] - kl.clamp(min=0))) < 1e-5
    assert same_mean(logged["rewards/chosen"], metrics["rewards/chosen"],
                     metrics["rewards/chosen"])
    # the matched rows as the KL baseline would give another z₀ (and, unclamped, another loss)
    assert abs(float(kto_kl(pol[:n], ref[:n]) - kl)) > 1e-3


# ------------------------------------- the logged loss under accumulation is the step's (#37)
def _reference_pass(obj, spec, tok, items):
    from mens.train.module import reference_scorer

    if obj.name in ("dpo", "kto"):                  # against other weights
        obj.prepare(reference_scorer(tiny_model(len(tok), 2), spec), items, None)


@pytest.mark.parametrize("objective", ["dpo", "orpo", "simpo", "kto"])
def test_the_logged_loss_is_the_mean_over_the_accumulation_window(compile_run, objective):
    """Lightning backwards each micro-batch's loss / grad_accum, so an optimizer step minimises
    the mean of its micro-batches' losses: that mean is what the step logs (issue #37: it was the
    last micro-batch's). Two micro-batches of two records on one model: the second one's logged
    loss is the mean of both; a new window starts afresh. DPO and SimPO (a plain mean over
    pairs) also equal the one batch of four; ORPO's token-weighted NLL and KTO's z₀ are per
    micro-batch, so their step is the mean of the micro-batches' (TRL logs the same)."""
    import torch

    from mens.objective import build
    from mens.objective.base import Step
    from mens.objective.dpo import pair_batch
    from mens.train.module import sequence_logps

    spec, tok, _, items, whole = fixed_batch(compile_run, objective)
    halves = [pair_batch(items[:2], spec.train.seq_len), pair_batch(items[2:], spec.train.seq_len)]
    model = tiny_model(len(tok), 0)
    chunked = spec.train.loss == "chunked"

    def ctx(group):
        return Step(logps=lambda b: sequence_logps(model, b, chunked), lm_loss=None, world=1,
                    all_sum=None, model=model, group=group)

    def fresh():
        obj = build(spec)
        _reference_pass(obj, spec, tok, items)
        return obj

    with torch.no_grad():
        alone = fresh()
        micro = [float(alone.step(ctx(None), dict(b))[1]["loss"]) for b in halves]
        assert abs(micro[0] - micro[1]) > 1e-4 * abs(micro[1])    # ≫ rel 1e-6: last ≠ mean
        obj = fresh()
        first = obj.step(ctx((0, 0)), dict(halves[0]))
        second = obj.step(ctx((0, 0)), dict(halves[1]))
        assert float(first[1]["loss"]) == pytest.approx(micro[0], rel=1e-6)
        assert float(second[0]) == pytest.approx(micro[1], rel=1e-6)   # what is backwarded
        assert float(second[1]["loss"]) == pytest.approx(sum(micro) / 2, rel=1e-6)
        assert set(first[1]) <= set(second[1])                 # every metric is the step's
        again = obj.step(ctx((0, 1)), dict(halves[0]))          # the next step: a new window
        assert float(again[1]["loss"]) == pytest.approx(micro[0], rel=1e-6)
        if objective in ("dpo", "simpo"):
            one = float(fresh().step(ctx(None), dict(whole))[1]["loss"])
            assert float(second[1]["loss"]) == pytest.approx(one, rel=1e-5)


def test_a_real_accumulated_step_logs_the_steps_loss(compile_run, tmp_path):
    """The same through the Lightning loop (mens.train.run): SimPO's first step over the same two
    pairs logs one loss whether they come as 2 × 1 or 1 × 2 (micro_batch × grad_accum). Before
    the fix 1 × 2 logged its last pair's loss: 1.9923 against the step's 2.0052 here. (That the
    two pairs' losses differ is the test above's, on the objective itself.)"""
    from mens.train.run import train_run

    def first_loss(micro: int, accum: int) -> float:
        out = tmp_path / f"{micro}x{accum}"
        spec, plan = compile_run(*FAST_TRAIN, "lane=simpo", *PAIRS, "train.seq_len=128",
                                 "train.max_steps=1", "train.eval_every=0",
                                 "train.eval_max_records=1", "train.global_batch=2",
                                 f"train.micro_batch={micro}", f"train.grad_accum={accum}",
                                 purpose="train")
        assert (spec.train.micro_batch, spec.train.grad_accum) == (micro, accum)
        train_run(spec, plan, out)
        (row,) = [r for r in read(out / "telemetry.jsonl") if r["event"] == "TRAIN_STEP"]
        return row["loss"]

    assert first_loss(1, 2) == pytest.approx(first_loss(2, 1), rel=1e-5)
