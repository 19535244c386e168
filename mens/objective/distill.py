"""On-policy distillation (GKD, Agarwal et al. 2023; TRL's GKDTrainer): on lmbda's share of
steps the student samples answers to the batch's prompts (mens.objective.sampling.generate),
a local teacher scores the same rows (no grad), and the loss is the generalised Jensen-Shannon
divergence between their next-token distributions over the answer tokens — forward KL at
beta=0, reverse KL at beta=1. The other steps train on the data's own answers (or, with
seq_kd, on the teacher's samples), as TRL's training_step does. The loss is summed over the
answer tokens and divided by the accumulation window's (every micro-batch, every rank), as
TRL divides by the window's num_items_in_batch: Distill.open_window.

A served teacher (lane.distill.teacher_url: mens.objective.served_teacher) returns log-probs of
given tokens only: every step is on the student's samples and the loss is the sampled-token
reverse KL (sampled_reverse_kl_loss), as Thinking Machines' on-policy distillation does it —
beta 1 and lmbda 1 are then required (mens.config.validate).

generalized_jsd_loss is TRL's GKDTrainer.generalized_jsd_loss, written here because TRL ships
it only under trl.experimental (unstable, and a 10 s+ import); tests/objective/
test_distill.py checks value and gradient against TRL's own function.

Shapes: N rows, L row tokens, T answer tokens (on-policy: the sampled completion), V vocab.
"""
from __future__ import annotations

import hashlib
import random

from mens.data.formats import turns
from mens.errors import ConfigError
from mens.objective.base import Objective
from mens.objective.grpo import prompt_head
from mens.objective.sampling import generate

IGNORE = -100


def generalized_jsd_loss(student_logits, teacher_logits, labels=None, beta: float = 0.5,
                         temperature: float = 1.0, reduction: str = "batchmean",
                         num_items_in_batch=None):
    """(N, L, V) student and teacher logits (already shifted: position i predicts label i) →
    the generalised JSD, as TRL defines it: with log-probs s, t at `temperature` and the
    mixture m = log((1−β)·e^s + β·e^t), β·KL(t‖m) + (1−β)·KL(s‖m) per position; β=0 is
    KL(t‖s) (forward), β=1 KL(s‖t) (reverse). Positions whose label is −100 are left out.
    reduction batchmean: the sum over the kept positions / their count (at least 1);
    num_items_in_batch: the sum / that count instead (an accumulation window's tokens)."""
    import torch
    import torch.nn.functional as F

    s = F.log_softmax(student_logits / temperature, dim=-1)
    t = F.log_softmax(teacher_logits / temperature, dim=-1)
    if beta == 0:
        jsd = F.kl_div(s, t, reduction="none", log_target=True)          # KL(t‖s)
    elif beta == 1:
        jsd = F.kl_div(t, s, reduction="none", log_target=True)          # KL(s‖t)
    else:
        b = torch.tensor(beta, dtype=s.dtype, device=s.device)
        mix = torch.logsumexp(torch.stack([s + torch.log1p(-b), t + torch.log(b)]), dim=0)
        jsd = b * F.kl_div(mix, t, reduction="none", log_target=True) + \
            (1 - b) * F.kl_div(mix, s, reduction="none", log_target=True)
    mask = None
    if labels is not None:
        mask = labels != IGNORE
        jsd = jsd[mask]
    if num_items_in_batch is not None:
        return jsd.sum() / torch.as_tensor(num_items_in_batch, device=jsd.device)
    if reduction == "batchmean":
        denom = mask.sum().clamp_min(1) if mask is not None else max(jsd.size(0), 1)
        return jsd.sum() / denom
    if reduction == "sum":
        return jsd.sum()
    if reduction == "mean":
        return jsd.mean()
    return jsd


def token_logps(logits, target):
    """(N, T, V) logits, (N, T) labels → (N, T) fp32 log-probs of the labels; 0 where −100."""
    lp = logits.float().log_softmax(-1).gather(-1, target.clamp_min(0)[..., None])[..., 0]
    return lp.masked_fill(target == IGNORE, 0.0)


def sampled_reverse_kl_loss(student_logps, teacher_logps, mask):
    """The served teacher's loss: (N, T) log-probs of the student's OWN sampled tokens under
    the student (with grad) and the teacher (none), mask (N, T) → (loss, reverse_kl).

    A server returns the log-probs of given tokens, not whole distributions, so KL(s‖t) is
    estimated per sampled token, k_t = log s(x_t) − log t(x_t), and trained as a REINFORCE
    advantage A_t = −k_t (the negative reverse KL as the reward, no gradient through it): as
    Thinking Machines' "On-Policy Distillation" (2025) and Tinker's cookbook do it
    (distillation's `reverse_kl = sampled_logprobs − teacher_logprobs`, advantages −= it, their
    importance-sampling loss −ratio·A with ratio = exp(logp − sampled logp) = 1 on-policy).
    Value: the mean of k_t over the masked tokens (the reverse-KL estimate itself); gradient:
    mean(k_t · ∇ log s(x_t)), whose expectation over the student's samples is the gradient of
    each position's KL(s‖t) with its prefix held fixed (discount 0, as theirs). (k_t as a plain
    loss would differentiate to mean ∇ log s, zero in expectation.)
    Unbiased for the student's temperature-1 distribution: sample at lane.distill.temperature=1
    for an exact on-policy estimate. Normalised as generalized_jsd_loss's batchmean."""
    import torch

    m = mask.float()
    n = m.sum().clamp_min(1)
    k = (student_logps.detach() - teacher_logps.to(student_logps.dtype)) * m       # (N, T)
    ratio = torch.exp(student_logps - student_logps.detach())                     # 1, ∇ log s
    return (k * ratio * m).sum() / n, k.sum() / n


def load_teacher(spec, student):
    """lane.distill.teacher (a rung name or an HF model directory) loaded frozen, in eval mode,
    at the run's precision; ConfigError when its vocabulary is not the student's (the JSD
    compares distributions over the same token ids)."""
    from omegaconf import OmegaConf

    from mens.config.cards.distill import teacher_source
    from mens.model.load import load_base
    from mens.resources import option_path

    where, name = teacher_source(spec.lane.distill.teacher)
    rung = OmegaConf.create({"name": "teacher", "path": name, "init": "pretrained"}) \
        if where == "path" else OmegaConf.load(option_path("rung", name))
    teacher = load_base(rung, "lora", spec.lane.precision, spec.hw.backend,
                        seed=int(spec.train.seed)).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    mine = student.get_output_embeddings().weight.shape[0]
    theirs = teacher.get_output_embeddings().weight.shape[0]
    if mine != theirs:
        raise ConfigError(f"lane.distill.teacher={spec.lane.distill.teacher} has a vocabulary of "
                          f"{theirs} tokens and the student {mine}: the teacher must share the "
                          f"student's tokenizer (a model of the same family and tokenizer).",
                          key="lane.distill.teacher")
    return teacher


def row_logits(model, ids, mask, keep: int | None = None):
    """(N, L) rows → (N, L−1, V) fp32 logits, position i predicting token i+1; keep: only the
    last `keep` positions' (an on-policy row's answer and the token before it)."""
    kw = {"logits_to_keep": keep} if keep else {}
    return model(input_ids=ids, attention_mask=mask, **kw).logits[:, :-1, :].float()


class Distill(Objective):
    """On-policy distillation with a local teacher (lane.distill.teacher: the JSD of full
    distributions) or a served one (lane.distill.teacher_url: the sampled-token reverse KL)."""
    name = "distill"
    measures_held_out = True

    def __init__(self, spec):
        super().__init__(spec)
        self.records, self.tokenizer, self.encoder, self.teacher = {}, None, None, None
        self.served = None       # mens.objective.served_teacher.ServedTeacher
        self.win = None          # this optimizer step's rows and normaliser (open_window)

    def bind(self, model, tokenizer, records: list, encoder=None) -> None:
        self.tokenizer, self.encoder = tokenizer, encoder
        self.records = {r["id"]: r for r in records}
        if self.lane.distill.teacher_url:
            from mens.objective.served_teacher import ServedTeacher
            self.served = ServedTeacher(self.lane.distill)
        else:
            self.teacher = load_teacher(self.spec, model)

    def _draw(self, ctx, ids: list) -> int:
        """A number fixed by the run's seed, the step and its records — not by a counter, so a
        resumed run draws what the uninterrupted one drew: the on-policy coin and the seed."""
        key = f"{self.spec.train.seed}|{ctx.group}|{','.join(map(str, ids))}"
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")

    def _teacher_on(self, device):
        if next(self.teacher.parameters()).device != device:   # Lightning moved the student
            self.teacher.to(device)
        return self.teacher

    def _sampled_rows(self, who, recs, seed: int, temperature: float):
        """(ids, mask, labels, T, lengths) of one sampled answer per prompt by `who`."""
        d = self.lane.distill
        T = int(d.max_completion_length)
        roll = generate(who, self.tokenizer, [prompt_head(r) for r in recs], 1, T,
                        temperature=temperature, seed=seed, encoder=self.encoder,
                        max_prompt_tokens=int(self.spec.train.seq_len) - T,
                        tools=[r.get("tools") for r in recs])
        ids, mask = roll.input_ids, roll.attention_mask
        labels = ids.masked_fill(mask == 0, IGNORE)
        labels[:, :roll.prompt_ids.shape[1]] = IGNORE
        return ids, mask, labels, roll.completion_ids.shape[1], roll.lengths

    def _data_rows(self, recs, device):
        """The records' own conversations (ids, labels on the answers), right-padded."""
        import torch

        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        enc = [self.encoder.encode(turns(r), int(self.spec.train.seq_len), tools=r.get("tools"))
               for r in recs]
        L = max(len(i) for i, _ in enc)
        ids = torch.tensor([i + [pad] * (L - len(i)) for i, _ in enc], device=device)
        labels = torch.tensor([lb + [IGNORE] * (L - len(lb)) for _, lb in enc], device=device)
        mask = torch.tensor([[1] * len(i) + [0] * (L - len(i)) for i, _ in enc], device=device)
        return ids, mask, labels, None, [sum(x != IGNORE for x in lb) for _, lb in enc]

    def _rows(self, ctx, ids: list, model, device):
        """One micro-batch's rows as TRL's training_step picks them: on-policy when random() <=
        lmbda (the student's samples), else seq_kd (the teacher's) or the data's answers →
        (ids, mask, labels, keep, lengths, on_policy)."""
        d = self.lane.distill
        recs = [self.records[i] for i in ids]
        draw = self._draw(ctx, ids)
        on_policy = random.Random(draw).random() <= float(d.lmbda)
        seed = draw % 2**31
        if on_policy:
            rows = self._sampled_rows(model, recs, seed, float(d.temperature))
        elif d.seq_kd:
            rows = self._sampled_rows(self._teacher_on(device), recs, seed, float(d.temperature))
        else:
            rows = self._data_rows(recs, device)
        return (*rows, on_policy)

    def open_window(self, ctx, batch: dict, model, device) -> dict:
        """Every micro-batch's rows of this optimizer step, made at its first micro-batch (the
        weights do not change inside the window: the same samples, the same seeds as one by
        one), and the window's answer tokens over every rank — the loss's normaliser, as TRL
        divides by the window's num_items_in_batch and MensModule.token_weighted_loss does for
        SFT. A rank's repeated prompt (strategy.Repeat) is in its rows but carries no label."""
        import torch

        micro = batch.get("window") or [[(i, False) for i in batch["record_ids"]]]
        rows, tokens = [], 0
        for mb in micro:
            ids, mask, labels, keep, lengths, on_policy = self._rows(ctx, [i for i, _ in mb],
                                                                      model, device)
            repeat = torch.tensor([rep for _, rep in mb], device=labels.device)
            labels = labels.masked_fill(repeat[:, None], IGNORE)
            target = labels[:, -keep:] if keep else labels[:, 1:]        # (N, T) or (N, L−1)
            tokens += int((target != IGNORE).sum())
            rows.append((ids, mask, target, keep, lengths, on_policy))
        n = torch.tensor(float(tokens), dtype=torch.float64)
        n = float(ctx.all_sum(n) if ctx.world > 1 else n)
        return {"key": ctx.group, "rows": rows, "tokens": max(n, 1.0), "loss": 0.0, "rkl": 0.0}

    def step(self, ctx, batch: dict):
        """One micro-batch of the step's window (opened at its first micro-batch). Its JSD is
        summed over its answer tokens and divided by the window's (every micro-batch, every
        rank): Lightning backwards loss / accum and DDP averages over ranks, so the loss handed
        back is that share × accum × world and the step's gradient is the window's token mean
        — not a mean of micro-batch means, which weighs a short answer's tokens more."""
        import torch

        d = self.lane.distill
        model = ctx.model
        device = next(model.parameters()).device
        if self.served is not None:
            recs = [self.records[i] for i in batch["record_ids"]]
            return self._served_step(model, recs, self._draw(ctx, batch["record_ids"]) % 2**31)
        pos = int(batch.get("window_pos", 0))
        win = self.win
        if pos == 0 or win is None or win["key"] != ctx.group or ctx.group is None:
            win = self.win = self.open_window(ctx, batch, model, device)
        ids, mask, target, keep, lengths, on_policy = win["rows"][pos]
        teacher = self._teacher_on(device)
        k = keep + 1 if keep else None
        with torch.no_grad():
            t_logits = row_logits(teacher, ids, mask, k)
        s_logits = row_logits(model, ids, mask, k)
        # TRL's compute_loss calls the loss at its default temperature 1: the sampling
        # temperature shapes the samples only
        scale = win["tokens"] / (ctx.accum * ctx.world)
        loss = generalized_jsd_loss(s_logits, t_logits, target, beta=float(d.beta),
                                    num_items_in_batch=scale)
        with torch.no_grad():
            rkl = generalized_jsd_loss(s_logits, t_logits, target, beta=1.0, reduction="sum")
        pieces = torch.stack([loss.detach().double() / (ctx.accum * ctx.world),
                              rkl.double() / win["tokens"]])
        pieces = ctx.all_sum(pieces) if ctx.world > 1 else pieces
        win["loss"] += float(pieces[0])
        win["rkl"] += float(pieces[1])
        metrics = self.over_step(ctx, {
            "loss": loss.detach(), "on_policy": torch.tensor(float(on_policy)),
            "completions/mean_length": torch.tensor(float(sum(lengths)) / len(lengths)),
            "rows/length": torch.tensor(float(ids.shape[1]))})
        # the window's token means so far: the step's at its last micro-batch
        metrics.update(loss=torch.tensor(win["loss"]), reverse_kl=torch.tensor(win["rkl"]))
        return loss, metrics

    def _served_step(self, model, recs, seed: int):
        """Every step on the student's own samples (config: lmbda=1, beta=1): their log-probs
        under the student (with grad) and the served teacher → sampled_reverse_kl_loss."""
        import torch

        ids, mask, labels, T, lengths = self._sampled_rows(model, recs, seed,
                                                           float(self.lane.distill.temperature))
        target = labels[:, -T:]                                                   # (N, T)
        s_lp = token_logps(row_logits(model, ids, mask, T + 1), target)
        t_lp = self.served.completion_logps(ids, mask, T)
        loss, rkl = sampled_reverse_kl_loss(s_lp, t_lp, target != IGNORE)
        return loss, {"loss": loss.detach(), "reverse_kl": rkl, "on_policy": torch.tensor(1.0),
                      "teacher/score_s": torch.tensor(self.served.score_s),
                      "completions/mean_length": torch.tensor(float(sum(lengths)) / len(lengths)),
                      "rows/length": torch.tensor(float(ids.shape[1]))}

    def _served_held_out(self, model, records: list, batch: int) -> dict:
        """held_out with a served teacher: the per-token reverse-KL estimate on the student's
        temperature-1 answers (no forward KL: that needs the teacher's whole distributions)."""
        import torch

        total, tokens = 0.0, 0
        for i in range(0, len(records), batch):
            ids, mask, labels, T, _ = self._sampled_rows(
                model, records[i:i + batch], int(self.spec.train.seed) + i, 1.0)
            target = labels[:, -T:]
            with torch.no_grad():
                s_lp = token_logps(row_logits(model, ids, mask, T + 1), target)
            t_lp = self.served.completion_logps(ids, mask, T)
            m = target != IGNORE
            total += float(((s_lp - t_lp) * m).sum())
            tokens += int(m.sum())
        return {"n": len(records), "split": "distill", "tokens": tokens,
                "reverse_kl": total / max(tokens, 1)}

    def held_out(self, model, records: list, batch: int = 8) -> dict:
        """The student's reverse KL to the teacher, KL(student‖teacher) per answer token, on
        its own answers to the held-out prompts: sampled at temperature 1 (the student's own
        distribution) with a fixed seed, full-vocabulary per position (beta=1 of the loss);
        the forward KL beside it. Measured before and after training (mens.train.run)."""
        import torch

        was = model.training
        model.eval()
        if self.served is not None:
            out = self._served_held_out(model, records, batch)
            model.train(was)
            return out
        device = next(model.parameters()).device
        teacher = self._teacher_on(device)
        sums = {"reverse_kl": 0.0, "forward_kl": 0.0}
        tokens = 0
        for i in range(0, len(records), batch):
            part = records[i:i + batch]
            ids, mask, labels, keep, _ = self._sampled_rows(
                model, part, int(self.spec.train.seed) + i, 1.0)
            target = labels[:, -keep:]
            n = int((target != IGNORE).sum())
            with torch.no_grad():
                s, t = row_logits(model, ids, mask, keep + 1), row_logits(teacher, ids, mask,
                                                                          keep + 1)
                for key, b in (("reverse_kl", 1.0), ("forward_kl", 0.0)):
                    sums[key] += float(generalized_jsd_loss(s, t, target, beta=b,
                                                            reduction="sum"))
            tokens += n
        model.train(was)
        return {"n": len(records), "split": "distill", "tokens": tokens,
                **{k: v / max(tokens, 1) for k, v in sums.items()}}
