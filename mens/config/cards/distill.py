"""On-policy distillation (TRL's GKD): the student samples, a teacher sharing its tokenizer scores
(local: a rung or an HF dir; served: an OpenAI-compatible server scoring token ids). Its section
lane.distill, valid values, the teacher's checks and card. Training: mens.objective.distill."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import OmegaConf

from mens.config.card import Card, StepCost
from mens.config.ranges import Range, count, pos
from mens.errors import ConfigError


@dataclass
class DistillConfig:
    # On-policy distillation (TRL's GKDConfig names and defaults, where mens has the knob)
    teacher: Optional[str] = None    # a rung name (conf/rung, e.g. tiny) or an HF model directory
    #                                  sharing the student's tokenizer (TRL: teacher_model_name_or_path)
    # or a served teacher (exactly one of the two): an OpenAI-compatible base URL whose server
    # scores token ids with vLLM's prompt_logprobs (mens serve, vLLM); beta and lmbda must be 1
    teacher_url: Optional[str] = None     # e.g. http://127.0.0.1:8000/v1
    teacher_model: Optional[str] = None   # the model the requests name (null: its first /v1/models)
    teacher_api_key_env: Optional[str] = None   # the NAME of the env var holding its key (never the key)
    beta: float = 0.5                # generalised JSD: 0 forward KL, 1 reverse KL (TRL's default)
    temperature: float = 0.9         # of the student's sampling (TRL's default; the loss uses 1)
    lmbda: float = 0.5               # the share of steps on the student's own samples (TRL's)
    seq_kd: bool = False             # off-policy steps on the teacher's samples, not the data's
    max_completion_length: int = 128   # tokens sampled per completion (TRL's max_new_tokens)


RANGES = {
    "beta": Range(lo=0, hi=1, example="0.5",
                  note="the generalised JSD's mix: 0 forward KL, 1 reverse KL"),
    "temperature": pos("the student's sampling temperature", "0.9"),
    "lmbda": Range(lo=0, hi=1, example="0.5",
                   note="the share of steps on the student's own samples"),
    "max_completion_length": count("tokens sampled per completion", "128"),
}


def check(cfg) -> None:
    """lane.distill: at most one teacher (none at all: the plan says, teacher_source); a local
    one that exists; a served one only where its loss is defined (sampled_reverse_kl_loss)."""
    d = OmegaConf.select(cfg, "lane.distill")
    teacher, url = d.get("teacher"), d.get("teacher_url")
    if teacher is not None and url is not None:
        raise ConfigError(
            f"`lane.distill.teacher={teacher}` and `lane.distill.teacher_url={url}` are both set: "
            f"a distillation run has one teacher, local (a rung or an HF model directory, scored "
            f"in this process) or served (an OpenAI-compatible server that scores token ids). "
            f"Drop one: `lane.distill.teacher=null` or `lane.distill.teacher_url=null`.",
            key="lane.distill.teacher_url")
    if teacher is not None:
        teacher_source(teacher)   # a teacher named but not found
        return
    if url is None:
        return
    if not str(url).startswith(("http://", "https://")):
        raise ConfigError(
            f"`lane.distill.teacher_url={url}` is not valid: it takes the server's OpenAI base URL "
            f"(e.g. `lane.distill.teacher_url=http://127.0.0.1:8000/v1`).",
            key="lane.distill.teacher_url")
    # a server returns the log-probs of given tokens, not whole next-token distributions: only
    # the reverse KL on the student's own samples can be estimated from them
    for key, want, why in (
            ("beta", 1, "beta interpolates forward and reverse KL through the generalised JSD, "
                        "which needs the teacher's whole next-token distribution at every "
                        "position; only beta=1, the reverse KL, can be estimated from the "
                        "log-probs of the student's sampled tokens"),
            ("lmbda", 1, "a step on the data's answers (lmbda < 1) needs the teacher's whole "
                         "distributions too; the sampled-token reverse KL is defined on the "
                         "student's own samples only, so every step must be on-policy"),
            ("seq_kd", False, "seq_kd samples the teacher's answers, and a served teacher only "
                              "scores")):
        if d.get(key) != want:
            fix = "lane.distill.beta=1 lane.distill.lmbda=1" if key != "seq_kd" else \
                "lane.distill.seq_kd=false"
            raise ConfigError(
                f"`lane.distill.{key}={d.get(key)}` cannot be used with a served teacher "
                f"(lane.distill.teacher_url={url}): {why}. Set `{fix}` (the loss is then the "
                f"sampled-token reverse KL of on-policy distillation), or use a local teacher "
                f"(`lane.distill.teacher=<rung or HF dir>` with `lane.distill.teacher_url=null`).",
                key=f"lane.distill.{key}")


def teacher_source(teacher) -> tuple[str, str]:
    """lane.distill.teacher → ("path", an HF model directory) or ("rung", a conf/rung option
    name); ConfigError naming the key otherwise (before anything loads)."""
    from pathlib import Path

    from mens.resources import option_path

    if teacher and (Path(str(teacher)) / "config.json").is_file():
        return "path", str(teacher)
    if teacher and "/" not in str(teacher) and option_path("rung", str(teacher)).is_file():
        return "rung", str(teacher)
    raise ConfigError(
        f"`lane.distill.teacher={teacher}` is not valid: objective distill needs a teacher that "
        f"shares the student's tokenizer — a rung name (an option of conf/rung, e.g. "
        f"`lane.distill.teacher=tiny`) or a Hugging Face model directory holding config.json "
        f"(e.g. `lane.distill.teacher=/models/teacher`) — or a served teacher "
        f"(`lane.distill.teacher_url=http://127.0.0.1:8000/v1 lane.distill.beta=1 "
        f"lane.distill.lmbda=1`).", key="lane.distill.teacher")


# the student samples one answer per prompt (on lmbda's share of steps; planned as every
# step), a local teacher scores the rows (no grad): its weights and its forward's logits
# are the planner's `teacher` term (mens.plan.memory.distill_teacher)
CARD = Card("distill", "prompts", ("chat", "pairs"), lambda lane: 1, "none", False,
            ("generation", "teacher"),
            lambda g, ref: StepCost((1,), forward=1, samples=1,
                                    forward_what="teacher forward", where=(
                "mens/objective/distill.py: Distill.step samples one completion per "
                "prompt (HF generate), scores the rows with the teacher (no grad) and "
                "the student, and takes the generalised JSD of their logits")),
            train="mens.objective.distill:Distill", config=DistillConfig, ranges=RANGES,
            check=check)
