"""On-policy distillation's loss against TRL's own GKDTrainer.generalized_jsd_loss (the installed
TRL; it ships GKD under trl.experimental.gkd): the same random logits, labels masked with
−100, β in {0, 0.5, 1} (forward KL, the JSD, reverse KL), a temperature ≠ 1 — value and the
gradient with respect to the student's logits within 1e-5. And the config: lane=distill
composes with TRL's defaults, a missing or unknown teacher is a ConfigError naming the key."""
from __future__ import annotations

import os

import pytest
import torch

import rl_util
from mens.objective.distill import generalized_jsd_loss

TOL = 1e-5
TEMPERATURE = 2.0          # ≠ 1, so the logits' division by it is checked too


@pytest.fixture(scope="module")
def trl_jsd():
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    try:
        from trl.experimental.gkd import GKDTrainer
    except ImportError as e:           # TRL without GKD: nothing to compare with
        pytest.skip(f"the installed TRL has no GKDTrainer ({e})")
    return GKDTrainer.generalized_jsd_loss


def logits(seed: int):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(3, 7, 50, generator=g, dtype=torch.float64) * 3
    t = torch.randn(3, 7, 50, generator=g, dtype=torch.float64) * 3
    labels = torch.randint(0, 50, (3, 7), generator=g)
    labels[0, :3] = -100               # a prompt
    labels[2, 5:] = -100               # padding after an answer
    return s, t, labels


def both(fn, s, t, labels, **kw):
    s = s.clone().requires_grad_(True)
    loss = fn(s, t, labels, **kw)
    loss.backward()
    return loss.detach(), s.grad


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("extra", [{}, {"num_items_in_batch": 40}], ids=["batchmean", "items"])
def test_loss_and_gradient_equal_trls(trl_jsd, beta, extra):
    s, t, labels = logits(int(beta * 10))
    kw = {"beta": beta, "temperature": TEMPERATURE, **extra}
    mine, my_grad = both(generalized_jsd_loss, s, t, labels, **kw)
    theirs, their_grad = both(trl_jsd, s, t, labels, **kw)
    assert mine.item() > 0
    assert abs(mine.item() - theirs.item()) <= TOL * max(1.0, abs(theirs.item()))
    assert (my_grad - their_grad).abs().max().item() <= TOL
    assert my_grad[0, :3].abs().max().item() == 0      # masked positions get no gradient


def test_the_comparison_tells_the_betas_and_the_mask_apart(trl_jsd):
    """The check above can fail: reverse and forward KL differ on these logits, and so does
    the loss with the mask ignored."""
    s, t, labels = logits(0)
    fwd = trl_jsd(s, t, labels, beta=0.0, temperature=TEMPERATURE)
    assert abs(generalized_jsd_loss(s, t, labels, beta=1.0, temperature=TEMPERATURE) - fwd) > 1e-3
    assert abs(generalized_jsd_loss(s, t, None, beta=0.0, temperature=TEMPERATURE) - fwd) > 1e-3
    assert abs(generalized_jsd_loss(s, t, labels, beta=0.0) - fwd) > 1e-3     # temperature 1


def test_lane_distill_composes_with_trls_defaults(compose):
    lane = compose(["lane=distill", "lane.distill.teacher=tiny"]).lane
    d = lane.distill
    assert (lane.objective, d.beta, d.lmbda, d.temperature, d.seq_kd,
            d.max_completion_length) == ("distill", 0.5, 0.5, 0.9, False, 128)


def test_a_distill_run_without_a_teacher_is_refused_by_the_plan(compose, compile_run):
    from mens.errors import ConfigError

    assert compose(["lane=distill"]).lane.distill.teacher is None    # the option composes
    with pytest.raises(ConfigError) as e:
        compile_run("+hw=cpu", "lane=distill")
    assert e.value.key == "lane.distill.teacher" and "rung name" in e.value.message
    with pytest.raises(ConfigError) as e:   # the sampled answer must leave room for a prompt
        compile_run("+hw=cpu", "lane=distill", "lane.distill.teacher=tiny", "train.seq_len=128")
    assert e.value.key == "lane.distill.max_completion_length"


@pytest.mark.parametrize("override", [["lane.distill.teacher=no_such_rung"],
                                      ["lane.distill.teacher=tiny", "lane.distill.beta=1.5"],
                                      ["lane.distill.teacher=tiny", "lane.distill.lmbda=-0.1"]])
def test_bad_distill_keys_are_config_errors(compose, override):
    from mens.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        compose(["lane=distill", *override])
    assert e.value.key.startswith("lane.distill.")


def test_the_plan_counts_the_teacher(compile_run):
    """The teacher's weights at the run's dtype, its forward's logits and the JSD's tensors are
    a `teacher` term: at least its weights, more when steps score the data's whole rows
    (lmbda < 1), and a larger teacher weighs what its parameters do."""
    from mens.plan.arch import Arch, teacher_arch
    from mens.config.compose import compose

    base = ["+hw=cpu", "train.seq_len=256", "train.micro_batch=4", "train.global_batch=4",
            "lane=distill", "lane.distill.max_completion_length=32"]
    tiny = Arch.of(compose(["+rung=tiny"]).rung).params()["total"] * 4        # fp32 on CPU
    _, mixed = compile_run(*base, "lane.distill.teacher=tiny")
    _, on = compile_run(*base, "lane.distill.teacher=tiny", "lane.distill.lmbda=1.0")
    _, big = compile_run(*base, "lane.distill.teacher=1.7b", "lane.distill.lmbda=1.0")
    assert tiny < on.components["teacher"] < mixed.components["teacher"]
    assert mixed.cell.split("/")[1] == "lora-distill"
    big_weights = teacher_arch(dict(compose(["+rung=1.7b"]).rung)).params()["total"] * 4
    assert big.components["teacher"] >= big_weights > 1.7e9 * 4


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """The tiny rung with a LoRA adapter moved off zero (so it differs from its teacher, the
    tiny rung itself), bound to two chat records."""
    from mens.config.compose import compose
    from mens.plan.spec import compile_run

    spec, _ = compile_run(compose(["+hw=cpu", "train.seq_len=128", "train.micro_batch=2",
                                   "train.global_batch=2", "lane=distill",
                                   "lane.distill.teacher=tiny",
                                   "lane.distill.max_completion_length=8"]), "train")
    return (spec, *rl_util.student(spec))


@pytest.mark.parametrize("lmbda, seq_kd, source", [(1.0, False, "student"),
                                                    (0.0, True, "teacher"),
                                                    (0.0, False, "data")])
def test_each_step_source_is_trls_loss_on_its_rows(student, lmbda, seq_kd, source):
    """A step on the student's samples (lmbda 1), the teacher's (seq_kd) or the data's answers
    gives TRL's compute_loss on those rows: both models' logits over the whole row, shifted,
    the prompt and padding masked by −100 — the step's narrower logits (an on-policy row's
    answer only) change nothing. The gradient reaches the adapter."""
    import dataclasses

    from mens.objective.base import Step
    from mens.objective.distill import IGNORE, Distill

    spec, model, tok, records, enc = student
    lane = dataclasses.replace(spec.lane, distill=dataclasses.replace(
        spec.lane.distill, lmbda=lmbda, seq_kd=seq_kd))
    obj = Distill(dataclasses.replace(spec, lane=lane))
    obj.bind(model, tok, records, enc)
    seen = {}
    real = obj._sampled_rows, obj._data_rows

    def spy(fn):
        def run(*a, **k):
            seen["rows"] = out = fn(*a, **k)
            seen["who"] = a[0] if fn is real[0] else None
            return out
        return run
    obj._sampled_rows, obj._data_rows = spy(real[0]), spy(real[1])
    model.zero_grad()
    loss, m = obj.step(Step(None, None, 1, None, model=model, group=(0, 0)),
                       {"record_ids": ["r0", "r1"]})
    loss.backward()
    assert m["on_policy"].item() == float(source == "student")
    assert seen["who"] is {"student": model, "teacher": obj.teacher, "data": None}[source]
    ids, mask, labels = seen["rows"][:3]
    with torch.no_grad():
        s = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
        t = obj.teacher(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    want = generalized_jsd_loss(s, t, labels[:, 1:], beta=0.5)
    assert (labels != IGNORE).sum() > 0 and want.item() > 1e-4
    assert abs(loss.item() - want.item()) <= 1e-5 * max(1.0, want.item())
    grads = [p.grad for n, p in model.named_parameters() if "lora_A" in n]
    assert grads and all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)


def test_the_eta_times_the_teachers_forward_at_its_size(compile_run):
    """The step's no-grad rows are the teacher's: a larger teacher's forward takes longer."""
    base = ["+hw=h100", "+rung=0.6b", "train.seq_len=1024", "train.micro_batch=4",
            "train.global_batch=4", "lane=distill", "lane.distill.lmbda=1.0"]
    fwd = {t: compile_run(*base, f"lane.distill.teacher={t}")[1].cost["parts"]["step_forward"]["s"]
           for t in ("tiny", "1.7b")}
    assert fwd["1.7b"] > 5 * fwd["tiny"]


# --- the loss's normaliser: the accumulation window's answer tokens (issue #49 item 11) ------------
SHORT, LONG = ("say hi", "hi"), ("count", " ".join(str(i) for i in range(1, 30)))


def test_two_micro_batches_give_the_one_batch_gradient(student):
    """Distillation's local loss is divided by the accumulation window's answer tokens, as
    TRL's trainers divide by the window's num_items_in_batch: two micro-batches of very
    different answer lengths, each backwarded / grad_accum as Lightning does, give the
    gradient (and the logged loss) of the one batch holding both — not a mean of the two
    micro-batches' means, which weighs the short answer's tokens as much as the long one's."""
    import dataclasses

    from mens.data.formats import turns
    from mens.objective.base import Step
    from mens.objective.distill import IGNORE, Distill

    spec, model, tok, _, enc = student
    lane = dataclasses.replace(spec.lane, distill=dataclasses.replace(spec.lane.distill,
                                                                      lmbda=0.0))
    obj = Distill(dataclasses.replace(spec, lane=lane))   # lmbda 0: the data's own answers
    records = [{"id": rid, "messages": [{"role": "user", "content": q},
                                        {"role": "assistant", "content": a}]}
               for rid, (q, a) in (("short", SHORT), ("long", LONG))]
    obj.bind(model, tok, records, enc)
    lens = [sum(x != IGNORE for x in enc.encode(turns(r), 128)[1]) for r in records]
    assert lens[1] > 4 * lens[0], lens          # the two means weigh very differently

    def grads():
        return torch.cat([p.grad.flatten() for n, p in model.named_parameters() if "lora_" in n])

    window = [[("short", False)], [("long", False)]]
    model.zero_grad()
    for pos, rid in enumerate(("short", "long")):
        ctx = Step(None, None, 1, None, model=model, group=(0, 7), accum=2)
        loss, m = obj.step(ctx, {"record_ids": [rid], "window": window, "window_pos": pos})
        (loss / ctx.accum).backward()              # Lightning's division by grad_accum
    split, logged = grads().clone(), m["loss"].item()
    model.zero_grad()
    loss, m = obj.step(Step(None, None, 1, None, model=model, group=(0, 8), accum=1),
                       {"record_ids": ["short", "long"]})
    loss.backward()
    whole = grads()
    assert whole.abs().max() > 0
    assert torch.allclose(split, whole, rtol=1e-4, atol=1e-7), \
        (split - whole).abs().max().item() / whole.abs().max().item()
    assert logged == pytest.approx(m["loss"].item(), rel=1e-4)   # the step's token mean
