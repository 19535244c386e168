"""GRPO on prompts: G sampled answers per prompt, rewarded by the spoke's oracle (or a judge),
group-normalised advantages, a clipped surrogate. Its section lane.grpo, valid values and card.
Training: mens.objective.grpo (rewards: mens.objective.rewards)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mens.config.card import Card, StepCost, section
from mens.config.ranges import Range, count, nonneg, pos

LOSSES = ("dapo", "grpo", "bnpo", "dr_grpo")   # TRL GRPOConfig.loss_type (dapo: default)
IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")  # TRL's
REWARDS = ("pass", "partial", "teacher",   # the reward kinds of mens.objective.rewards
           "shuffled", "length")            # controls (issue #39), see rewards.py
SCALES = ("group", "batch", "none")         # TRL's scale_rewards


@dataclass
class GrpoConfig:
    num_generations: int = 4         # completions sampled per prompt (the group)
    max_completion_length: int = 64  # tokens generated per completion
    temperature: float = 1.0         # of the sampling
    beta: float = 0.04               # KL weight to the reference (0: no reference pass); TRL 1.x
    #                                  defaults to 0, DeepSeekMath's GRPO used 0.04
    epsilon: float = 0.2             # the clip's lower side
    epsilon_high: Optional[float] = None   # the clip's upper side; null: epsilon
    loss_type: str = "dapo"          # dapo | grpo | bnpo | dr_grpo (LOSSES; TRL's default)
    reward: str = "partial"          # pass | partial (the spoke's own oracle; partial: the share
    #                                  of an answer's pieces that pass) | teacher (the teacher= judge)
    scale_rewards: str = "group"     # group | batch | none (TRL's scale_rewards; none: Dr. GRPO)
    format_reward: float = 0.0       # weight of the format reward beside the oracle's
    oracle_timeout_s: float = 10.0   # per completion; a timeout is a failed reward
    # rows per `generate` call (or server request) when sampling an optimizer step's window
    # (micro_batch × grad_accum prompts × G rows), a multiple of G (TRL's name); null: the
    # planner picks the largest that fits, from one micro-batch's rows to the window's
    generation_batch_size: Optional[int] = None
    # local: transformers `generate` in the step; server: an OpenAI-compatible endpoint, the
    # adapter reloaded after each optimizer step (mens.objective.rollout_server)
    generation: str = "local"
    server_url: Optional[str] = None  # generation=server; null: mens starts `mens serve` itself
    # the server's log-probs correct the loss as TRL's vllm_importance_sampling_* do
    importance_sampling_mode: str = "sequence_mask"   # token|sequence _ truncate|mask (TRL's)
    importance_sampling_clip_max: float = 3.0          # TRL's C_max (vllm_importance_sampling_cap)
    use_bias_correction_kl: bool = True   # the KL term × the ratio (TRL 1.16's default, True


RANGES = {
    "num_generations": Range(lo=2, integer=True, example="4",
                             note="completions per prompt: a group of one has no "
                                  "advantage"),
    "max_completion_length": count("tokens generated per completion", "64"),
    "temperature": pos("the sampling temperature", "1.0"),
    "importance_sampling_clip_max": pos("the importance ratio's cap", "3.0"),
    "beta": nonneg("the KL weight to the reference; 0: no reference pass", "0.04"),
    "epsilon": Range(lo=0, hi=1, lo_open=True, hi_open=True, example="0.2",
                     note="the clip's lower side"),
    "epsilon_high": pos("the clip's upper side; null: epsilon", "0.28"),
    "format_reward": nonneg("the format reward's weight", "0.0"),
    "generation_batch_size": count("rows per generate call sampling the window, a multiple "
                                   "of num_generations; null: the planner picks", "32"),
    "oracle_timeout_s": pos("seconds per oracle call (a timeout fails the reward)",
                            "10"),
}
CHOICES = {
    "loss_type": list(LOSSES),
    "reward": list(REWARDS),
    "scale_rewards": list(SCALES),
    "generation": ["local", "server"],
    "importance_sampling_mode": list(IS_MODES),
}
CARD = Card("grpo", "prompts", ("chat", "pairs"),
            lambda lane: int(section(lane, "grpo").num_generations), "when_beta", True,
            ("group_rows", "generation", "reference_logits", "reference_copy", "server",
             "oracle_procs"),   # each by formula in mens.plan.rl (plan.json: sampling)
            lambda g, ref: StepCost((g,), forward=g if ref else 0, samples=g, oracle=True,
                                    forward_what="reference forward", where=(
                "mens/objective/grpo.py: Grpo.open_window samples G completions of each "
                "prompt of the step's window (HF generate, in calls of "
                "lane.grpo.generation_batch_size rows) and waits for the oracle once; "
                "Grpo.step scores each micro-batch's G rows (completion_logps) and, when "
                "grpo.beta > 0, the reference's log-probs of them (no grad)")),
            train="mens.objective.grpo:Grpo", config=GrpoConfig, ranges=RANGES, choices=CHOICES)
