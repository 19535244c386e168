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

from mens.config.cards.grpo import LOSSES as LOSS_TYPES   # declared once, with lane.grpo
from mens.config.cards.grpo import SCALES
from mens.errors import ConfigError
from mens.objective.base import Objective
from mens.objective.rollout_server import importance
from mens.objective.grpo_window import held_out_counts, nanstd  # noqa: F401 (re-exported)
from mens.model.generate import end_ids  # noqa: F401 (re-exported)
from mens.objective.sampling import Rollout, completion_logps, generate, prompt_ids  # noqa: F401

STD_EPS = 1e-4          # TRL's: advantages / (std + 1e-4)


def group_advantages(rewards, G: int, scale: str = "group", batch_std=None):
    """(N,) rewards, grouped G by G → (N,) advantages: reward minus its group's mean, divided
    by the group's (scale="group") or the whole batch's ("batch") std + 1e-4; "none": centred
    only (Dr. GRPO). A NaN reward (unverified: no oracle here) is left out of its group's mean
    and std and gets advantage 0, as TRL treats a completion no reward function could score.
    batch_std: the batch's std when the batch spans ranks (TRL gathers every process's rewards
    before scaling; a group never spans ranks: its G samples are drawn together on one)."""
    import torch

    if scale not in SCALES:
        raise ConfigError(f"grpo.scale_rewards={scale} is not one of {', '.join(SCALES)}.",
                          key="grpo.scale_rewards")
    grouped = rewards.view(-1, G)                                        # (B, G)
    adv = rewards - torch.nanmean(grouped, dim=1).repeat_interleave(G)  # (N,)
    if scale == "group":
        std = nanstd(grouped, dim=1).repeat_interleave(G) if G > 1 else torch.zeros_like(rewards)
    elif batch_std is not None:
        std = torch.as_tensor(batch_std, dtype=rewards.dtype).expand_as(rewards)
    else:
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else \
            torch.zeros_like(rewards)
    if scale != "none":
        adv = adv / (std + STD_EPS)
    return torch.nan_to_num(adv, nan=0.0)


def grpo_loss(logps, old_logps, ref_logps, advantages, mask, beta: float = 0.0,
              epsilon_low: float = 0.2, epsilon_high: float | None = None,
              loss_type: str = "dapo", max_completion_length: int | None = None,
              num_items: float | None = None, num_sequences: float | None = None,
              bias_correction_kl: bool = True,
              importance_weights=None):
    """The clipped surrogate of GRPO on (N, T) per-token log-probs → (loss, metrics).

    old_logps: the sampling policy's (None: one update per generation, = logps.detach());
    ref_logps: the reference's (None iff beta == 0); advantages (N,); mask (N, T) of 0/1.
    Per token: −min(r·A, clip(r, 1−ε_low, 1+ε_high)·A) + β·r·(exp(ref−logp) − (ref−logp) − 1),
    r = exp(logp − old): the k3 KL estimator, times r when bias_correction_kl (TRL 1.16's
    `use_bias_correction_kl`, default True since huggingface/trl#6503; False before it: the
    unbiased reverse-KL gradient; r is 1 in value on-policy but still carries a gradient).

    Reduced by loss_type over a normaliser: num_items (the active tokens; default this call's
    mask.sum()) for dapo and bnpo, num_sequences (default this call's N) for grpo (each row's
    token mean, summed) and dr_grpo (sum / (num_sequences · max_completion_length)). The Grpo
    objective passes the whole optimizer step's counts over every rank (see Grpo.step) and
    scales for Lightning's accumulation and DDP's mean; with the defaults this is TRL's loss on
    one micro-batch. importance_weights: (N, T) or (N, 1), the server-sampling correction
    (TRL's vLLM one, mens.objective.rollout_server.importance), multiplying the surrogate before
    the KL term.
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
    seqs = per_token.size(0) if num_sequences is None else num_sequences
    items = mask.sum() if num_items is None else num_items
    items = torch.as_tensor(items, dtype=mask.dtype, device=mask.device).clamp(min=1.0)
    if loss_type == "grpo":
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).sum() / max(seqs, 1)
    elif loss_type == "dr_grpo":
        if not max_completion_length:
            raise ValueError("loss_type dr_grpo needs max_completion_length")
        loss = (per_token * mask).sum() / (max(seqs, 1) * max_completion_length)
    else:            # dapo, bnpo: over active tokens (see Grpo.step for bnpo's window)
        loss = (per_token * mask).sum() / items

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
    reference is the SFT policy it starts from). grpo.beta=0: no reference at all.

    As TRL: one rollout per optimizer step for all its micro-batches (open_window), every loss
    type's normaliser over the window and every rank. Unlike TRL: bnpo normalises by the
    window's tokens (TRL: each micro-batch's, which its docs say varies with the micro-batch
    size), so in mens bnpo equals dapo; frac_reward_zero_std is always the share of groups with
    one reward (TRL, under scale_rewards=batch, tests the batch's std)."""
    name = "grpo"
    measures_held_out = True

    def __init__(self, spec):
        super().__init__(spec)
        self.records, self.tokenizer, self.encoder, self.ref_model = {}, None, None, None
        self.teacher = None                    # grpo.reward=teacher: built once, in bind
        self.said_truncated = self.said_repeated = False
        self.win = None                        # this optimizer step's rollout (grpo_window)
        # the sampling RNG: a generator of its own per rank, seeded from train.seed at the first
        # step (or a checkpoint's state), advanced by sampling only: never the global RNG
        self.rng, self.saved_rng, self.ranks = None, None, (0, 1, None)
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
        """Greedy answers to the held-out prompts, scored by the spoke's oracle (held_out_counts:
        unverified answers apart, the pass rate over the verified) — what GRPO trains toward,
        measured before and after training (mens.train.run)."""
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
        return {"n": len(texts), "check": check, **held_out_counts(rew), "answers": texts}

    def state_dict(self) -> dict:
        """Every rank's sampling RNG state (gathered: a collective, as saving is), so a resumed
        run draws what the uninterrupted one would have."""
        import torch

        if self.rng is None:
            return {} if self.saved_rng is None else {"sampling_rng": self.saved_rng}
        rank, world, all_sum = self.ranks
        state = self.rng.get_state()
        if world == 1:
            return {"sampling_rng": [state]}
        buf = torch.zeros(world, state.numel(), dtype=torch.int32)
        buf[rank] = state.to(torch.int32)
        buf = all_sum(buf)
        return {"sampling_rng": [row.to(torch.uint8) for row in buf]}

    def load_state_dict(self, state: dict) -> None:
        self.saved_rng, self.rng = state.get("sampling_rng"), None

    def sampler(self, ctx, device):
        """This rank's sampling generator: a checkpoint's state, else seeded from train.seed
        (and the rank, so that ranks draw differently)."""
        from mens.objective.sampling import sampling_rng

        self.ranks = (ctx.rank, ctx.world, ctx.all_sum)
        if self.rng is None:
            self.rng = sampling_rng(int(self.spec.train.seed) + 7919 * ctx.rank, device)
            if self.saved_rng is not None and ctx.rank < len(self.saved_rng):
                self.rng.set_state(self.saved_rng[ctx.rank])
        return self.rng

    def rollout(self, model, heads: list, G: int, T: int, tools: list) -> Rollout:
        """G samples of each prompt (the one place GRPO generates): in-process `generate` from
        this rank's sampling RNG, or the server's (lane.grpo.generation=server) seeded from it."""
        import torch

        grpo = self.lane.grpo
        if self.server is not None:
            seed = int(torch.randint(0, 2 ** 31 - 1, (1,), generator=self.rng))
            return self.server.generate(model, self.tokenizer, heads, G, T,
                                        temperature=float(grpo.temperature), seed=seed,
                                        encoder=self.encoder, tools=tools,
                                        max_prompt_tokens=int(self.spec.train.seq_len) - T)
        return generate(model, self.tokenizer, heads, G, T, temperature=float(grpo.temperature),
                        rng=self.rng, encoder=self.encoder,
                        max_prompt_tokens=int(self.spec.train.seq_len) - T, tools=tools)

    def sample(self, model, heads: list, G: int, T: int, tools: list) -> Rollout:
        """The window's rollout in calls of lane.grpo.generation_batch_size rows — the rule
        the planner sized the generation phase by (mens.plan.rl.calls; null, a spec from a mens
        before the key: the whole window in one call) — joined in order."""
        from mens.objective.sampling import concat
        from mens.plan.rl import calls

        rows = getattr(self.lane.grpo, "generation_batch_size", None)
        rolls, i = [], 0
        for k in calls(len(heads), rows, G):
            rolls.append(self.rollout(model, heads[i:i + k], G, T, tools[i:i + k]))
            i += k
        return concat(rolls)

    def score(self, recs: list, heads: list, texts: list, G: int):
        """Rewards of the window's answers (mens.objective.rewards.Rewards), G per record."""
        from mens.objective.rewards import oracle_rewards

        grpo = self.lane.grpo
        return oracle_rewards(self.spec.spoke.admission.check, [r for r in recs for _ in range(G)],
                              [h for h in heads for _ in range(G)], texts, reward=grpo.reward,
                              format_weight=float(grpo.format_reward),
                              timeout_s=float(grpo.oracle_timeout_s), teacher=self.teacher,
                              syntax=self.tool_syntax())

    def open_window(self, ctx, batch: dict):
        """Sample, score and normalise every micro-batch of this optimizer step at once (see
        mens.objective.grpo_window): the rows, advantages and each loss type's normaliser."""
        import torch

        from mens.objective.grpo_window import Window, health, moments, std_of

        grpo = self.lane.grpo
        G, T = int(grpo.num_generations), int(grpo.max_completion_length)
        micro = batch.get("window") or [[(i, False) for i in batch["record_ids"]]]
        flat = [x for mb in micro for x in mb]
        recs = [self.records[i] for i, _ in flat]
        heads = [prompt_head(r) for r in recs]
        self.sampler(ctx, next(ctx.model.parameters()).device)
        roll = self.sample(ctx.model, heads, G, T, [r.get("tools") for r in recs])
        real_p = [not rep for _, rep in flat]
        real = torch.tensor(real_p).repeat_interleave(G)                        # (N,)
        keep = [i for i, ok in enumerate(real.tolist()) if ok]
        rew = self.score([r for r, ok in zip(recs, real_p) if ok],
                         [h for h, ok in zip(heads, real_p) if ok], [roll.texts[i] for i in keep], G)

        def spread(vals):    # the real rows' values in place, NaN on a repeat's (never judged)
            out = [math.nan] * len(real)
            for i, v in zip(keep, vals):
                out[i] = v
            return out
        rewards = torch.tensor(spread(rew.total), dtype=torch.float32)          # (N,)
        batch_std = std_of(moments(ctx, rewards)) if grpo.scale_rewards == "batch" else None
        adv = group_advantages(rewards, G, grpo.scale_rewards, batch_std=batch_std)
        device = roll.completion_ids.device
        loss_mask = roll.completion_mask * real.to(device)[:, None]             # (N, T)
        counts = torch.stack([loss_mask.sum().double(), real.sum().double()])
        counts = ctx.all_sum(counts) if ctx.world > 1 else counts
        parts = {k: spread(v) for k, v in (("pass", rew.passed), ("partial", rew.partial),
                                           ("teacher", rew.teacher), ("format", rew.format))
                 if v is not None}
        numbers = health(ctx, rewards, parts, G, real, roll)
        # the judge's own counts (oracle/*, teacher/*: this rank's); the reward numbers are
        # health's, over every rank
        said = {k: float(v) for k, v in rew.metrics.items() if k not in numbers
                and isinstance(v, (int, float)) and not isinstance(v, bool)}
        numbers.update({**said, "prompts/repeated": float(len(flat) - sum(real_p)),
                        "prompts/truncated": float(roll.truncated)})
        spans, start = [], 0
        for mb in micro:
            spans.append((start, start + G * len(mb)))
            start += G * len(mb)
        self.say(roll, len(flat) - sum(real_p))
        return Window(ctx.group, roll, adv.to(device), loss_mask, spans, float(counts[0]),
                      float(counts[1]), numbers)

    def say(self, roll, repeated: int) -> None:
        seq, T = int(self.spec.train.seq_len), int(self.lane.grpo.max_completion_length)
        if roll.truncated and not self.said_truncated:   # loud once, counted every step
            self.said_truncated = True
            print(f"mens: note: grpo: {roll.truncated} prompt(s) of this batch cut to their last "
                  f"{seq - T} tokens (train.seq_len − max_completion_length); counted as "
                  f"prompts/truncated", file=sys.stderr)
        if repeated and not self.said_repeated:
            self.said_repeated = True
            print(f"mens: note: grpo: {repeated} prompt(s) repeated to even out the ranks are "
                  f"sampled with their step but neither judged nor trained nor counted; counted "
                  f"as prompts/repeated", file=sys.stderr)

    def step(self, ctx, batch: dict):
        """One micro-batch of the step's window (opened at its first micro-batch). Lightning
        backwards loss / accum and DDP averages over ranks: the loss handed back is this
        micro-batch's share of the window's loss × accum × world, so the step's gradient is the
        window's loss's over every rank (as MensModule.token_weighted_loss does for SFT)."""
        import torch

        from mens.objective.grpo_window import add_sums, loss_sums

        grpo = self.lane.grpo
        pos = int(batch.get("window_pos", 0))
        if pos == 0 or self.win is None or self.win.key != ctx.group or ctx.group is None:
            self.win = self.open_window(ctx, batch)
        win = self.win
        a, b = win.spans[pos]
        roll, model = win.roll, ctx.model
        ids, mask = roll.input_ids[a:b], roll.attention_mask[a:b]
        cmask, lmask = roll.completion_mask[a:b], win.loss_mask[a:b]
        logps, entropy = completion_logps(model, ids, mask, cmask, float(grpo.temperature),
                                          entropy=True)                       # (n, T) each
        ref = self.reference(model, ids, mask, cmask)
        w, sampled = importance(roll, logps, cmask, grpo, rows=(a, b))   # server rollouts
        loss, m = grpo_loss(logps, None, ref, win.advantages[a:b], lmask, beta=float(grpo.beta),
                            epsilon_low=float(grpo.epsilon), epsilon_high=grpo.epsilon_high,
                            loss_type=grpo.loss_type,
                            max_completion_length=int(grpo.max_completion_length),
                            num_items=win.num_items, num_sequences=win.num_sequences,
                            bias_correction_kl=bool(grpo.use_bias_correction_kl),
                            importance_weights=w)
        piece = loss.detach().double()
        win.loss += float(ctx.all_sum(piece) if ctx.world > 1 else piece)
        means = add_sums(win, loss_sums(ctx, lmask, m, entropy), float(grpo.beta))
        metrics = {"loss": torch.tensor(win.loss),
                   **{k: torch.tensor(float(v)) for k, v in {**win.health, **means}.items()},
                   "completion_tokens": torch.tensor(float(lmask.sum())),
                   # the rows' length (prompt width + completion width ≤ seq_len): a
                   # calibration record of grpo is measured at its longest (mens.calibrate)
                   "rows/length": torch.tensor(float(ids.shape[1])), **sampled}
        return loss * (ctx.accum * ctx.world), metrics
