"""How the steps run and are judged cheaply: `train` (shapes, schedule, checkpoints, the training
paths), `plan` (the planner's margins and contract) and `logger`, with their valid values."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from omegaconf import MISSING

from mens.config.ranges import AUTO, Range, count, nonneg


@dataclass
class TrainConfig:
    seq_len: Any = AUTO              # auto: from the spoke's length manifest
    micro_batch: Any = AUTO          # auto: largest that fits the plan
    grad_accum: Any = AUTO           # auto: global_batch / micro_batch
    global_batch: Any = AUTO         # auto: default_global_batch
    default_global_batch: int = 16
    packing: bool = True
    max_steps: int = -1              # -1: run the curriculum's epochs
    warmup_ratio: float = 0.03
    schedule: str = "cosine"
    grad_clip: float = 1.0
    seed: int = 0
    init_adapter: Optional[str] = None   # start from this PEFT adapter (DPO after SFT)
    checkpoint_every: int = 50           # optimizer steps between checkpoints
    eval_every: int = 0                  # steps between held-out evals in training (0: off)
    eval_max_records: Optional[int] = None   # score at most this many held-out records (null: all)
    # The training paths (issue #13). auto: the paths the memory contract's cells were fitted on
    # (conf/contract.yaml `paths`); another choice plans with the analytic terms, uncalibrated.
    attention: str = AUTO            # auto | block_mask (4-D mask) | per_record (no b·s² mask)
    loss: str = AUTO                 # auto | full_logits | chunked (the head chunk by chunk)
    heap: str = AUTO                 # auto | default (glibc's) | fixed (8 MiB mmap threshold, CPU)


DEFAULT_WANDB_PROJECT = "mens"   # logger.project when neither it nor $WANDB_PROJECT is set


@dataclass
class LoggerConfig:
    # the `logger` group: `logger=wandb|csv|tensorboard|none` (Lightning's own loggers)
    kind: str = MISSING              # wandb (offline unless $WANDB_MODE) | csv | tensorboard | none
    project: Optional[str] = None    # wandb project; null: $WANDB_PROJECT, else `mens`
    entity: Optional[str] = None     # wandb entity; null: $WANDB_ENTITY, else wandb's default


@dataclass
class PlanConfig:
    force: bool = False              # train despite a refusal (loud, recorded)
    uncalibrated_margin: float = 0.25
    contract: Optional[str] = None   # null: the shipped conf/contract.yaml (mens.conf)


# Knobs that accept `auto` or a positive int (checked after compose).
AUTO_INTS = ("train.seq_len", "train.micro_batch", "train.grad_accum", "train.global_batch",
             "hw.devices")


# The training paths and their choices (besides auto): what mens.plan.memory models
TRAIN_PATHS = {"attention": ("block_mask", "per_record"), "loss": ("full_logits", "chunked"),
               "heap": ("default", "fixed")}


# Every number of these sections and its valid values (mens.config.validate): null is accepted
# wherever the field is Optional (its meaning is in the note); `[]`: every list item.
RANGES = {
    "train.default_global_batch": count("sequences per optimizer step", "16"),
    "train.max_steps": count("optimizer steps; -1 runs the curriculum's epochs", "200",
                             also=(-1,)),
    "train.warmup_ratio": Range(lo=0, hi=1, example="0.03",
                                note="the fraction of steps spent warming up"),
    "train.grad_clip": nonneg("max gradient norm; 0 turns clipping off", "1.0"),
    "train.seed": Range(lo=0, hi=2**32 - 1, integer=True, example="0",
                        note="Lightning's seed_everything takes a uint32"),
    "train.checkpoint_every": count("optimizer steps between checkpoints", "50"),
    "train.eval_every": nonneg("optimizer steps between held-out evals during training; 0 "
                               "evaluates only before and after", "50"),
    "train.eval_max_records": count("held-out records scored; null scores all", "100"),
    "plan.uncalibrated_margin": nonneg("the fraction added to an uncalibrated cell", "0.25"),
}
# The strings with a fixed set of values
CHOICES = {
    "train.schedule": ["cosine", "linear", "constant"],
    **{f"train.{k}": ["auto", *v] for k, v in TRAIN_PATHS.items()},
    "logger.kind": ["wandb", "csv", "tensorboard", "none"],
}
