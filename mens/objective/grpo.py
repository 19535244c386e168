"""GRPO: group-normalised advantages and the clipped surrogate loss with a KL term, each as
TRL's GRPOTrainer computes it (checked against TRL's own code on the same tensors and the same
model: tests/objective/test_grpo.py), and the Grpo objective that strings them together with
the sampling (mens.objective.sampling) and the rewards (mens.objective.rewards) in the step.

Shapes: B prompts, G completions per prompt, N = B·G rows; P prompt tokens (left-padded),
T completion tokens (right-padded after each row's end token).
"""
from __future__ import annotations

import math
import sys

from mens.config.schema import GRPO_LOSSES as LOSS_TYPES   # one list: validation's and ours
from mens.config.schema import GRPO_SCALES as SCALES
from mens.errors import ConfigError
from mens.objective.base import Objective
from mens.objective.rollout_server import importance
from mens.objective.sampling import (Rollout, completion_logps, end_ids, generate,  # noqa: F401
                                     prompt_ids)

STD_EPS = 1e-4          # TRL's: advantages / (std + 1e-4)


def nanstd(x, dim=None):
    """Unbiased std ignoring NaNs (NaN where fewer than 2 values), as TRL's trainer.utils."""
    import torch

    if dim is None:
        x, dim = x.flatten(), 0
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    var = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True)
    n = (~torch.isnan(x)).sum(dim=dim, keepdim=True)
    var = var * torch.where(n > 1, n / (n - 1), torch.full_like(var, math.nan))
    return var.sqrt().squeeze(dim)


def group_advantages(rewards, G: int, scale: str = "group"):
    """(N,) rewards, grouped G by G → (N,) advantages: reward minus its group's mean, divided
    by the group's (scale="group") or the whole batch's ("batch") std + 1e-4; "none": centred
    only (Dr. GRPO). A NaN reward (unverified: no oracle here) is left out of its group's mean
    and std and gets advantage 0, as TRL treats a completion no reward function could score."""
    import torch

    if scale not in SCALES:
        raise ConfigError(f"grpo.scale_rewards={scale} is not one of {', '.join(SCALES)}.",
                          key="grpo.scale_rewards")
    grouped = rewards.view(-1, G)                                        # (B, G)
    adv = rewards - torch.nanmean(grouped, dim=1).repeat_interleave(G)  # (N,)
    if scale == "group":
        std = nanstd(grouped, dim=1).repeat_interleave(G) if G > 1 else torch.zeros_like(rewards)
    else:
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else \
            torch.zeros_like(rewards)
    if scale != "none":
        adv = adv / (std + STD_EPS)
    return torch.nan_to_num(adv, nan=0.0)


def grpo_loss(logps, old_logps, ref_logps, advantages, mask, beta: float = 0.0,
              epsilon_low: float = 0.2, epsilon_high: float | None = None,
              loss_type: str = "dapo", max_completion_length: int | None = None,
              num_items: float | None = None, bias_correction_kl: bool = True,
              importance_weights=None):
    """The clipped surrogate of GRPO on (N, T) per-token log-probs → (loss, metrics).

    old_logps: the sampling policy's (None: one update per generation, = logps.detach());
    ref_logps: the reference's (None iff beta == 0); advantages (N,); mask (N, T) of 0/1.
    Per token: −min(r·A, clip(r, 1−ε_low, 1+ε_high)·A) + β·r·(exp(ref−logp) − (ref−logp) − 1),
    r = exp(logp − old): the k3 KL estimator, times r when bias_correction_kl (TRL 1.x's default
    `use_bias_correction_kl=True`: the unbiased reverse-KL gradient; r is 1 in value on-policy
    but still carries a gradient). Reduced by loss_type: grpo: each row's mean, then the batch
    mean; bnpo: over all tokens; dr_grpo: sum / (N · max_completion_length); dapo (TRL's
    default): sum / num_items, the active tokens of one accumulation window (default
    mask.sum()). No gradient-accumulation division here (the loop owns it).
    importance_weights: (N, T) or (N, 1), the server-sampling correction (TRL's vLLM one,
    mens.objective.rollout_server.importance), multiplying the surrogate before the KL term.
    """
    import torch

    if loss_type not in LOSS_TYPES:
        raise ConfigError(f"grpo.loss_type={loss_type} is not one of {', '.join(LOSS_TYPES)}.",
                          key="grpo.loss_type")
    if beta != 0.0 and ref_logps is None:
        raise ValueError("beta != 0 needs the reference's log-probs")
    eps_high = epsilon_low if epsilon_high is None else epsilon_high
    mask = mask.to(logps.dtype)
    old = logps.detach() if old_logps is None else old_logps
    ratio = torch.exp(logps - old)                                        # (N, T)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + eps_high)
    adv = advantages.unsqueeze(1)                                         # (N, 1)
    per_token = -torch.min(ratio * adv, clipped * adv)                    # (N, T)
    if importance_weights is not None:
        per_token = per_token * importance_weights
    if beta != 0.0:
        d = ref_logps - logps
        kl = torch.exp(d) - d - 1                                         # (N, T) k3
        if bias_correction_kl:
            kl = kl * ratio
        per_token = per_token + beta * kl
    if loss_type == "grpo":
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        loss = (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    elif loss_type == "dr_grpo":
        if not max_completion_length:
            raise ValueError("loss_type dr_grpo needs max_completion_length")
        loss = (per_token * mask).sum() / (per_token.size(0) * max_completion_length)
    else:
        norm = mask.sum() if num_items is None else torch.as_tensor(num_items, dtype=mask.dtype)
        loss = (per_token * mask).sum() / norm.clamp(min=1.0)

    def masked_mean(x):
        return ((x * mask).sum() / mask.sum().clamp(min=1.0)).item()
    with torch.no_grad():
        low = (ratio < 1 - epsilon_low) & (adv < 0)       # clipped where it would matter
        high = (ratio > 1 + eps_high) & (adv > 0)
        metrics = {"clip_ratio/low_mean": masked_mean(low.to(mask.dtype)),
                   "clip_ratio/high_mean": masked_mean(high.to(mask.dtype)),
                   "clip_ratio/region_mean": masked_mean((low | high).to(mask.dtype)),
                   "kl": masked_mean(kl) if beta != 0.0 else math.nan}
    return loss, metrics


def prompt_head(rec: dict) -> list[dict]:
    """A chat record's prompt: its messages up to its last user turn (what answers respond to,
    as mens.eval.indomain takes held-out prompts)."""
    msgs = rec["messages"]
    return msgs[:max(j for j, m in enumerate(msgs) if m["role"] == "user") + 1]


def reward_teacher(spec):
    """The teacher cascade of grpo.reward=teacher (mens.synth.teacher.Teacher), from the run's
    `teacher` section: keys are read from the environment by name, never from the config."""
    from dataclasses import asdict, is_dataclass

    from mens.synth.teacher import Teacher

    cfg = getattr(spec, "teacher", None)
    if cfg is None:
        raise ConfigError("grpo.reward=teacher scores answers through the run's teacher, and this "
                          "run's spec carries no `teacher` section to build one from (the planned "
                          "spec must keep the composed `teacher=`): use grpo.reward=pass|partial "
                          "(the spoke's own oracle).", key="teacher")
    return Teacher.from_config(asdict(cfg) if is_dataclass(cfg) else cfg)


class Grpo(Objective):
    """GRPO with verifiable rewards: each step samples grpo.num_generations answers to each of
    its prompts from the policy as it is (HF generate), scores them with the spoke's oracle
    (grpo.reward=teacher: the run's teacher, built once in bind; mens.objective.rewards),
    normalises rewards per group and takes the clipped surrogate with the k3 KL to the
    reference (one update per generation, TRL's num_iterations=1 default).

    The reference is scored inside the step: the base with the adapter disabled (lora, qlora),
    or a frozen copy of the initial weights (full, or a run from train.init_adapter, whose
    reference is the SFT policy it starts from). grpo.beta=0: no reference at all."""
    name = "grpo"
    measures_held_out = True

    def __init__(self, spec):
        super().__init__(spec)
        self.calls = 0                         # steps sampled so far (the sampling seed's offset)
        self.records, self.tokenizer, self.encoder, self.ref_model = {}, None, None, None
        self.teacher = None                    # grpo.reward=teacher: built once, in bind
        self.said_truncated = False
        self.server = None                     # generation=server: mens.objective.rollout_server

    def bind(self, model, tokenizer, records: list, encoder=None) -> None:
        import copy

        self.tokenizer, self.encoder = tokenizer, encoder
        self.records = {r["id"]: r for r in records}
        if self.lane.grpo.generation == "server":
            from mens.objective.rollout_server import RolloutServer
            self.server = RolloutServer.start(self.spec, model)
        if self.lane.grpo.reward == "teacher":     # only then: other runs need no teacher
            self.teacher = reward_teacher(self.spec)
        init_adapter = getattr(self.spec.train, "init_adapter", None)
        if self.lane.grpo.beta > 0 and (self.lane.method == "full" or init_adapter):
            self.ref_model = copy.deepcopy(model).eval()     # the initial policy, frozen
            for p in self.ref_model.parameters():
                p.requires_grad_(False)

    def tool_syntax(self) -> str | None:
        """The tool-call syntax the policy writes (its template's; mens.data.tool_syntax), which
        the oracle reads its answers' calls in: Hermes when the run has no encoder."""
        return self.encoder.tool_syntax if self.encoder is not None else "hermes"

    def reference(self, model, input_ids, attention_mask, cmask):
        import contextlib

        import torch

        if self.lane.grpo.beta == 0:
            return None
        ref = self.ref_model if self.ref_model is not None else model
        off = contextlib.nullcontext() if self.ref_model is not None else model.disable_adapter()
        with torch.no_grad(), off:
            return completion_logps(ref, input_ids, attention_mask, cmask, self.lane.grpo.temperature)

    def held_out(self, model, records: list, batch: int = 8) -> dict:
        """Greedy answers to the held-out prompts, scored by the spoke's oracle: the pass rate
        and the mean partial reward (the share of an answer's pieces that pass) — what GRPO
        trains toward, measured before and after training (mens.train.run)."""
        from mens.objective.rewards import oracle_rewards

        T = int(self.lane.grpo.max_completion_length)
        heads = [prompt_head(r) for r in records]
        texts: list[str] = []
        for i in range(0, len(heads), batch):
            texts += generate(model, self.tokenizer, heads[i:i + batch], 1, T, encoder=self.encoder,
                              max_prompt_tokens=int(self.spec.train.seq_len) - T, greedy=True,
                              tools=[r.get("tools") for r in records[i:i + batch]]).texts
        check = self.spec.spoke.admission.check
        rew = oracle_rewards(check, records, heads, texts, reward="partial",
                             timeout_s=float(self.lane.grpo.oracle_timeout_s),
                             syntax=self.tool_syntax())
        return {"n": len(texts), "check": check, "passed": int(sum(rew.passed)),
                "pass_rate": sum(rew.passed) / len(texts) if texts else None,
                "reward_mean": sum(rew.partial) / len(texts) if texts else None,
                "rewards": list(rew.partial), "answers": texts,
                "timeouts": rew.metrics.get("oracle/timeouts", 0),
                "unverified": rew.metrics.get("oracle/unverified", 0)}

    def step(self, ctx, batch: dict):
        import torch

        from mens.objective.rewards import oracle_rewards

        grpo = self.lane.grpo
        G = int(grpo.num_generations)
        recs = [self.records[i] for i in batch["record_ids"]]           # B prompts
        heads = [prompt_head(r) for r in recs]
        model = ctx.model
        T = int(grpo.max_completion_length)
        sample = self.server.generate if self.server is not None else generate
        roll = sample(model, self.tokenizer, heads, G, T, temperature=float(grpo.temperature),
                        seed=int(self.spec.train.seed) + 1000 * self.calls, encoder=self.encoder,
                        max_prompt_tokens=int(self.spec.train.seq_len) - T,
                        tools=[r.get("tools") for r in recs])
        self.calls += 1
        if roll.truncated and not self.said_truncated:   # loud once, counted every step
            self.said_truncated = True
            print(f"mens: note: grpo: {roll.truncated} prompt(s) of this batch cut to their last "
                  f"{int(self.spec.train.seq_len) - T} tokens (train.seq_len − "
                  f"max_completion_length); counted as prompts/truncated", file=sys.stderr)
        rew = oracle_rewards(self.spec.spoke.admission.check,
                             [r for r in recs for _ in range(G)],
                             [h for h in heads for _ in range(G)], roll.texts,
                             reward=grpo.reward, format_weight=float(grpo.format_reward),
                             timeout_s=float(grpo.oracle_timeout_s), teacher=self.teacher,
                             syntax=self.tool_syntax())
        device = roll.completion_ids.device
        rewards = torch.tensor(rew.total, dtype=torch.float32, device=device)     # (N,)
        adv = group_advantages(rewards, G, grpo.scale_rewards)                    # (N,)
        ids, mask, cmask = roll.input_ids, roll.attention_mask, roll.completion_mask
        logps = completion_logps(model, ids, mask, cmask, float(grpo.temperature))  # (N, T)
        ref = self.reference(model, ids, mask, cmask)
        w, sampled = importance(roll, logps, cmask, grpo)     # server rollouts: TRL's correction
        loss, m = grpo_loss(logps, None, ref, adv, cmask, beta=float(grpo.beta),
                            epsilon_low=float(grpo.epsilon), epsilon_high=grpo.epsilon_high,
                            loss_type=grpo.loss_type,
                            max_completion_length=int(grpo.max_completion_length),
                            importance_weights=w)
        grouped = rewards.view(-1, G)
        lengths = torch.tensor(roll.lengths, dtype=torch.float32)
        numeric = {k: v for k, v in rew.metrics.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        metrics = {"loss": loss.detach(), **{k: torch.tensor(float(v)) for k, v in m.items()},
                   **{k: torch.tensor(float(v)) for k, v in numeric.items()},
                   "reward_std": torch.nan_to_num(nanstd(grouped, dim=1)).mean(),
                   "completions/mean_length": lengths.mean(),
                   "completions/clipped_ratio": torch.tensor(1.0 - sum(roll.eos) / len(roll.eos)),
                   "completion_tokens": torch.tensor(float(sum(roll.lengths))),
                   # the rows' length this step (prompt width + completion width ≤ seq_len): a
                   # calibration record of grpo is measured at its longest (mens.calibrate)
                   "rows/length": torch.tensor(float(ids.shape[1])),
                   "prompts/truncated": torch.tensor(float(roll.truncated)), **sampled}
        return loss, metrics
