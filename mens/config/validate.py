"""Validation of a composed config: what Hydra's type checks do not catch.

Keys the schema does not define (Hydra accepts `+train.seq_lenn=512` silently), the `auto`-able
knobs, every number's valid values (RANGES: `hw.memory_gb=-3` is a ConfigError naming the key,
not a plan for -3 GiB), string choices (CHOICES); of the lane's sections only those it reads are checked (its
objective's, and lane.quantization on method qlora). Each error
is one paragraph naming the key, the value and an example of a good one (exit 2).
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, fields, is_dataclass
from typing import Iterable

from omegaconf import DictConfig, ListConfig, OmegaConf

from mens.config.explain import unknown_key_error
from mens.config.schema import (AUTO, AUTO_INTS, DATA_FORMATS, DPO_LOSSES, GRPO_IS_MODES,
                                GRPO_LOSSES, GRPO_REWARDS, GRPO_SCALES, METHODS, OBJECTIVES,
                                SYNTH_STRATEGIES, TEACHER_TIERS, TRAIN_PATHS, MensConfig)
from mens.errors import ConfigError


def validate(cfg: DictConfig) -> None:
    """Reject keys the schema does not define and bad values: `auto`-able knobs, numbers out of
    their range (`RANGES`), strings outside their choices (`CHOICES`), lane sections missing."""
    unknown = list(_unknown_keys(cfg, MensConfig, ""))
    if unknown:
        raise unknown_key_error(unknown[0])
    for key in (*AUTO_INTS, "eval.batch_size"):
        value = OmegaConf.select(cfg, key)
        if value == AUTO:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(
                f"`{key}={value}` is not valid: it takes `auto` or a positive integer "
                f"(e.g. `{key}=auto` lets the planner choose).", key=key)
    lr = OmegaConf.select(cfg, "lane.optimizer.lr")
    if lr != AUTO and (isinstance(lr, bool) or not isinstance(lr, (int, float)) or lr <= 0
                       or not math.isfinite(lr)):
        raise ConfigError(
            f"`lane.optimizer.lr={lr}` is not valid: it takes `auto` (the rung's recommended "
            f"rate) or a positive number such as 2e-4.", key="lane.optimizer.lr")
    gc = OmegaConf.select(cfg, "lane.gradient_checkpointing")
    if gc not in (AUTO, True, False):
        raise ConfigError(
            f"`lane.gradient_checkpointing={gc}` is not valid: use auto, true or false.",
            key="lane.gradient_checkpointing")
    for key, allowed in CHOICES.items():
        if _unselected(cfg, key):
            continue
        for where, value in _values(cfg, key):
            if value not in allowed:
                near = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
                hint = f" (did you mean `{near[0]}`?)" if near else ""
                raise ConfigError(
                    f"`{where}={value}` is not valid{hint}: it takes one of "
                    f"{', '.join(map(str, allowed))}.", key=where)
    for key, rule in RANGES.items():
        if _unselected(cfg, key):
            continue
        for where, value in _values(cfg, key):
            if not rule.accepts(value):
                raise ConfigError(
                    f"`{where}={_show(value)}` is not valid: it takes {rule.describe()}"
                    f"{f' — {rule.note}' if rule.note else ''} (e.g. "
                    f"`{_override_key(key, where, rule.example)}={rule.example}`).", key=where)
    _check_lists(cfg)
    if OmegaConf.select(cfg, "lane.objective", default=None) == "distill":
        _check_teacher(cfg)


def _check_teacher(cfg: DictConfig) -> None:
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


def _values(cfg: DictConfig, key: str) -> Iterable[tuple[str, object]]:
    """(concrete key, value) pairs of a table key. `[]` stands for every item of a list
    (`spoke.sources[].weight` → `spoke.sources[0].weight`, ...). Absent nodes yield nothing:
    `lane.lora` is null on lane=full; a null Optional value is
    fine here (Hydra already refused null where the schema does not allow it)."""
    if OmegaConf.select(cfg, key.split(".")[0], default=None) is None:
        return   # a section absent or missing (`teacher` in a rerun of a training run)
    head, brackets, rest = key.partition("[]")
    if not brackets:
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None:
            yield key, value
        return
    items = OmegaConf.select(cfg, head, default=None)
    if not isinstance(items, ListConfig):
        return
    for i, item in enumerate(items):
        where = f"{head}[{i}]"
        if rest:
            if not isinstance(item, DictConfig):
                continue
            item, where = OmegaConf.select(item, rest.lstrip("."), default=None), where + rest
        if item is not None:
            yield where, item


def _override_key(key: str, where: str, example: str) -> str:
    """How the user sets it: a whole list (`curriculum.caps=[4,7,10]`) or one item's field in
    Hydra's override syntax (`spoke.sources.1.weight=0.5`)."""
    if example.startswith("["):
        return key.split("[]")[0]
    return where.replace("[", ".").replace("]", "")


def _show(value) -> str:
    """A number as the user likely typed it (`-3`, not OmegaConf's float `-3.0`)."""
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return str(int(value))
    return str(value)


@dataclass(frozen=True)
class Range:
    """A number's valid values: within [lo, hi] (an end excluded with lo_open / hi_open),
    finite, whole when `integer`; the values in `also` are sentinels accepted besides."""
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    also: tuple = ()
    note: str = ""          # what the value means / what its sentinels do
    example: str = "1"

    def accepts(self, v) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        if v in self.also:
            return True
        if not math.isfinite(v) or (self.integer and v != int(v)):
            return False
        if self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo)):
            return False
        return self.hi is None or (v < self.hi or (not self.hi_open and v == self.hi))

    def describe(self) -> str:
        noun = "integer" if self.integer else "number"
        lo, hi = (None if b is None else _show(float(b)) for b in (self.lo, self.hi))
        if self.lo is not None and self.hi is not None and self.lo == self.hi:
            text = f"only {lo}"
        elif self.hi is None and self.lo == 0:
            text = f"a positive {noun}" if self.lo_open else f"a {noun} >= 0"
        elif self.hi is None and self.integer and self.lo == 1:
            text = "a positive integer"
        elif self.hi is None:
            text = f"a{'n' if self.integer else ''} {noun} {'>' if self.lo_open else '>='} {lo}"
        elif not self.lo_open and not self.hi_open:
            text = f"a{'n' if self.integer else ''} {noun} from {lo} to {hi}"
        else:
            text = (f"a{'n' if self.integer else ''} {noun} {'>' if self.lo_open else '>='} "
                    f"{lo} and {'<' if self.hi_open else '<='} {hi}")
        return " or ".join([*(_show(float(a)) for a in self.also), text])


def _pos(note: str = "", example: str = "1", **kw) -> Range:
    return Range(lo=0, lo_open=True, note=note, example=example, **kw)


def _count(note: str = "", example: str = "1", **kw) -> Range:
    return Range(lo=1, integer=True, note=note, example=example, **kw)


def _nonneg(note: str = "", example: str = "0", **kw) -> Range:
    return Range(lo=0, note=note, example=example, **kw)


# Every number in the schema (mens/config/schema.py) and its valid values. Null is accepted
# wherever the schema's field is Optional (its meaning is in the note); `[]`: every list item.
RANGES: dict[str, Range] = {
    "hw.memory_gb": _pos("the device's memory in GiB; null detects it", "24"),
    "hw.tflops_bf16": _pos("dense bf16 TFLOPS for time estimates; null: unknown", "989"),
    "hw.bandwidth_gbs": _pos("memory bandwidth in GB/s (datasheet); null: unknown", "3350"),
    "hw.link.intra_gbs": _pos("GB/s per device per direction within a node (NVLink, PCIe); "
                              "null: unknown", "450"),
    "hw.link.inter_gbs": _pos("GB/s per node per direction between nodes, all its NICs; null: "
                              "unknown", "400"),
    "hw.link.efficiency": Range(lo=0, hi=1, lo_open=True, example="0.8",
                                note="the share of the link figures a collective achieves "
                                     "(1.0 when they are measured bus bandwidths)"),
    "hw.nodes": _count("nodes of the run (world size = hw.devices × hw.nodes)", "1"),
    "hw.device_min_gb": _nonneg("GiB a device named like this tier has at least", "60"),
    "hw.device_below_gb": _pos("GiB a device named like this tier has less than; null: no "
                               "bound", "60"),
    "launch.max_restarts": _nonneg("restarts torchrun (or Ray) makes of a failed group (each "
                                   "resumes from the last checkpoint)", "1"),
    "cloud.mfu": Range(lo=0, hi=1, lo_open=True, example="0.35",
                       note="an assumed model FLOPs utilisation replacing the measured speed "
                            "model; null: the speed model"),
    "cloud.setup_hours": _nonneg("hours of set-up and download added to each estimate", "0.25"),
    "cloud.max_age_days": _count("days after which the catalogue is called old", "90"),
    "cloud.top": _count("rows of the ranked table", "20"),
    "cloud.tokens": _count("training tokens of one run; null: the spoke's corpus × epochs", "5000000"),
    "hw.headroom.advisory_frac": Range(lo=0, hi=1, lo_open=True, example="0.75",
                                       note="the fraction of memory the runtime hands out"),
    "hw.headroom.reserve_gb": _nonneg("GiB kept back for the driver and OS", "1.5"),
    "hw.headroom.frac": Range(lo=0, hi=1, hi_open=True, example="0.1",
                              note="the fraction of usable memory the planner keeps free"),
    "hw.headroom.min_gb": _nonneg("GiB the planner keeps free at least", "0.5"),
    **{f"rung.{k}": _count("an architecture size from the model's config.json", "1024")
       for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings")},
    **{f"rung.{k}": _nonneg("0 for a dense model / one without linear attention; else from "
                            "the model's config.json", "0")
       for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                 "shared_expert_intermediate_size", "linear_attention_layers",
                 "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                 "linear_value_head_dim", "linear_conv_kernel_dim")},
    "rung.rope_theta": _pos("the RoPE base", "1000000"),
    "rung.rms_norm_eps": _pos("the RMSNorm epsilon", "1e-6"),
    "rung.lora_lr": _pos("the learning rate `lane.optimizer.lr=auto` gives LoRA lanes", "2e-4"),
    "rung.full_lr": _pos("the learning rate `lane.optimizer.lr=auto` gives the full lane", "1e-5"),
    "rung.global_batch": _count("null: train.default_global_batch", "16"),
    "spoke.min_rating": Range(lo=0, hi=5, example="3",
                              note="records are rated 1 to 5; lower ones are dropped"),
    "spoke.seq_len_hint": _count("tokens, used when the spoke has no length manifest", "1024"),
    "spoke.sources[].weight": _nonneg("mix weight, normalised over the spoke's sources; "
                                      "0 leaves a source out", "0.5"),
    "data.min_rating": Range(lo=0, hi=5, example="3",
                             note="records with a `rating` below it are dropped; null keeps all"),
    "data.eval_fraction": Range(lo=0, hi=1, lo_open=True, hi_open=True, example="0.05",
                                note="the share of records held out (by record hash)"),
    "data.decontam_n": _nonneg("words per n-gram of the decontamination check; 0 turns it off",
                               "13"),
    "data.decontam_threshold": Range(lo=0, hi=1, lo_open=True, example="0.5",
                                     note="the share of an eval record's n-grams found in "
                                          "train that removes it"),
    "lane.lora.r": _count("the LoRA rank", "16"),
    "lane.lora.alpha": _count("the LoRA scale numerator (scaling = alpha / r)", "32"),
    "lane.lora.dropout": Range(lo=0, hi=1, hi_open=True, example="0.0",
                               note="a probability"),
    "lane.quantization.blocksize": Range(
        lo=64, hi=64, integer=True, example="64",
        note="training loads 4-bit weights through transformers' BitsAndBytesConfig, which has "
             "no blocksize setting (bitsandbytes' default, 64, is what the run uses)"),
    "lane.optimizer.weight_decay": _nonneg("decoupled weight decay", "0.01"),
    "lane.optimizer.betas[]": Range(lo=0, hi=1, hi_open=True, example="[0.9,0.999]",
                                    note="Adam's two moment decay rates"),
    "lane.dpo.beta": _pos("the DPO temperature (TRL's default 0.1)", "0.1"),
    "lane.orpo.beta": _pos("the weight λ of ORPO's odds-ratio term (TRL's default 0.1)", "0.1"),
    "lane.simpo.beta": _pos("SimPO's reward scale (the SimPO paper's 2.0; TRL's CPOConfig 0.1)",
                            "2.0"),
    "lane.simpo.gamma_beta_ratio": _nonneg("SimPO's target margin γ over β (the paper's 0.5; "
                                           "TRL's simpo_gamma = this × β)", "0.5"),
    "lane.kto.beta": _pos("the KTO temperature (TRL's default 0.1)", "0.1"),
    "lane.kto.desirable_weight": _pos("the weight of desirable records", "1.0"),
    "lane.kto.undesirable_weight": _pos("the weight of undesirable records", "1.0"),
    "lane.grpo.num_generations": Range(lo=2, integer=True, example="4",
                                       note="completions per prompt: a group of one has no "
                                            "advantage"),
    "lane.grpo.max_completion_length": _count("tokens generated per completion", "64"),
    "lane.grpo.temperature": _pos("the sampling temperature", "1.0"),
    "lane.grpo.importance_sampling_clip_max": _pos("the importance ratio's cap", "3.0"),
    "lane.grpo.beta": _nonneg("the KL weight to the reference; 0: no reference pass", "0.04"),
    "lane.grpo.epsilon": Range(lo=0, hi=1, lo_open=True, hi_open=True, example="0.2",
                               note="the clip's lower side"),
    "lane.grpo.epsilon_high": _pos("the clip's upper side; null: epsilon", "0.28"),
    "lane.grpo.format_reward": _nonneg("the format reward's weight", "0.0"),
    "lane.grpo.oracle_timeout_s": _pos("seconds per oracle call (a timeout fails the reward)",
                                       "10"),
    "lane.distill.beta": Range(lo=0, hi=1, example="0.5",
                               note="the generalised JSD's mix: 0 forward KL, 1 reverse KL"),
    "lane.distill.temperature": _pos("the student's sampling temperature", "0.9"),
    "lane.distill.lmbda": Range(lo=0, hi=1, example="0.5",
                                note="the share of steps on the student's own samples"),
    "lane.distill.max_completion_length": _count("tokens sampled per completion", "128"),
    "curriculum.epochs": _count("", "3"),
    "curriculum.pack_window": Range(lo=0, integer=True, example="2",
                                    note="how many phases apart two records may share a packed "
                                         "row; null: any, 0: none"),
    "curriculum.caps[]": Range(lo=1, hi=10, integer=True, example="[4,7,10]",
                               note="the max difficulty (1-10) of the records an epoch sees"),
    "train.default_global_batch": _count("sequences per optimizer step", "16"),
    "train.max_steps": _count("optimizer steps; -1 runs the curriculum's epochs", "200",
                              also=(-1,)),
    "train.warmup_ratio": Range(lo=0, hi=1, example="0.03",
                                note="the fraction of steps spent warming up"),
    "train.grad_clip": _nonneg("max gradient norm; 0 turns clipping off", "1.0"),
    "train.seed": Range(lo=0, hi=2**32 - 1, integer=True, example="0",
                        note="Lightning's seed_everything takes a uint32"),
    "train.checkpoint_every": _count("optimizer steps between checkpoints", "50"),
    "train.eval_every": _nonneg("optimizer steps between held-out evals during training; 0 "
                                "evaluates only before and after", "50"),
    "train.eval_max_records": _count("held-out records scored; null scores all", "100"),
    "plan.uncalibrated_margin": _nonneg("the fraction added to an uncalibrated cell", "0.25"),
    "serve.port": Range(lo=0, hi=65535, integer=True, example="8089",
                        note="0 takes any free port"),
    "serve.max_tokens": _count("tokens when a request sets none", "256"),
    "serve.max_body_bytes": _count("bytes; a larger request body gets 413", "1048576"),
    "serve.max_header_bytes": _count("bytes; larger request headers get 431", "16384"),
    "serve.max_queue": Range(lo=0, integer=True, example="32",
                             note="requests waiting for the model; more get 503"),
    "gate.max_prompts": _count("held-out prompts per spoke the gate asks and scores", "64"),
    "gate.max_new_tokens": _count("tokens per gate answer", "256"),
    "gate.k": _count("samples per prompt for pass@k", "4"),
    "gate.min_gain": Range(lo=-1, hi=1, example="0",
                           note="the least in-domain gain the interval must clear (a fraction: "
                                "points of pass rate, or the share of eval loss removed)"),
    "gate.max_regression": Range(lo=0, hi=1, example="0.05",
                                 note="the most a collateral metric may confidently lose (a "
                                      "fraction)"),
    "eval.max_prompts": _count("held-out prompts per spoke", "64"),
    "eval.k": _nonneg("samples per prompt for pass@k; 0: a greedy answer only", "4"),
    "eval.temperature": _nonneg("the sampling temperature of the k samples", "0.8"),
    "eval.top_p": Range(lo=0, hi=1, lo_open=True, example="0.95", note="nucleus sampling's mass"),
    "eval.max_new_tokens": _count("tokens per answer", "256"),
    "eval.judge_prompts": _count("held-out prompts the judge compares (each in both orders)", "16"),
    "eval.confidence": Range(lo=0.5, hi=1, hi_open=True, example="0.95",
                             note="the coverage of every interval"),
    "eval.bootstrap": Range(lo=100, integer=True, example="2000",
                            note="bootstrap resamples of the items"),
    "eval.min_items": _count("items below which a gain is too few to judge (the gate records a "
                             "lowered floor)", "20"),
    "eval.num_fewshot": Range(lo=0, integer=True, example="5", note="few-shot examples; null: "
                                                                     "each task's default"),
    "eval.limit": _pos("items per task (an int) or a fraction below 1; null: all", "100"),
    "eval.max_length": _count("lm-eval's context window in tokens", "2048"),
    "eval.seed": Range(lo=0, hi=2**32 - 1, integer=True, example="0", note="a uint32"),
    "studio.port": Range(lo=0, hi=65535, integer=True, example="8090",
                         note="0 takes any free port"),
    "studio.max_body_bytes": _count("bytes; a larger request body to the studio gets 413",
                                    "65536"),
    "afk.max_attempts": _count("starts of one queue item before it is recorded as failed", "3"),
    "afk.nice": Range(lo=0, hi=19, integer=True, example="10",
                      note="the niceness added to the queue's children (19: lowest priority)"),
    "afk.memory_factor": Range(lo=1, example="1.5",
                               note="× the planned peak (+ afk.memory_overhead_gb) a child's RSS "
                                    "may reach; null: no limit"),
    "afk.memory_overhead_gb": _nonneg("GiB of RSS a child has besides the planned window", "2"),
    "afk.poll_s": _pos("seconds between reads of the child's RSS and the control file", "1"),
    "compare.prompts": _count("held-out prompts asked", "8"),
    "compare.max_tokens": _count("greedy tokens per answer", "48"),
    "calibrate.steps": Range(lo=2, integer=True, example="3",
                             note="optimizer steps measured; step 2 is the first with Adam state"),
    "calibrate.eval_records": _count("held-out records scored when train.eval_max_records is "
                                     "null", "2"),
    "calibrate.max_rss_gb": _pos("GiB of RSS that kills the child; null: no guard", "48"),
    "calibrate.max_predicted_gb": _pos("GiB of predicted peak above which a shape is skipped; "
                                       "null: run every shape", "48"),
    "calibrate.timeout_s": _pos("seconds before the child is killed", "7200"),
    "teacher.concurrency": _count("teacher requests in flight at once", "4"),
    "teacher.max_retries": Range(lo=0, integer=True, example="4",
                                 note="retries of a 429 / 5xx / timeout before the next candidate"),
    "teacher.backoff_s": _nonneg("seconds before the first retry; doubles each time", "1"),
    "teacher.timeout_s": _pos("seconds one teacher request may take", "120"),
    "teacher.temperature": Range(lo=0, hi=2, example="0.7", note="the sampling temperature"),
    "teacher.max_tokens": _count("tokens per teacher reply", "4096"),
    "teacher.candidates[].price_in_per_mtok": _nonneg(
        "USD per million prompt tokens; null: unknown (cost recorded as null)", "0.4"),
    "teacher.candidates[].price_out_per_mtok": _nonneg(
        "USD per million completion tokens; null: unknown (cost recorded as null)", "1.6"),
    "tree.depth": _count("levels of the topic tree below its root", "3"),
    "tree.branching": _count("subtopics asked for per node", "4"),
    "synth.per_leaf": _count("samples asked for per leaf", "8"),
    "synth.repair_turns": Range(lo=0, hi=10, integer=True, example="2",
                                note="repair turns after an oracle failure (0: none)"),
    "synth.seed_examples": _count("seed examples shown per request", "3"),
    "synth.seed": Range(lo=0, integer=True, example="0",
                        note="the seed sent to the teacher and used for seed-example picks"),
    "synth.oracle_timeout_s": _pos("seconds the oracle may take per candidate", "10"),
    "synth.oracle_memory_mb": Range(lo=64, integer=True, example="1024",
                                    note="MB of address space for the oracle's child process"),
    "curate.min_rating": Range(lo=1, hi=5, example="4", note="the lowest rating kept by the filter"),
    "curate.rating": Range(lo=1, hi=5, integer=True, example="4", note="the rating to set (1-5)"),
    "curate.near_dup": Range(lo=0, hi=1, lo_open=True, example="0.8",
                             note="the n-gram Jaccard similarity of a near-duplicate"),
    "curate.near_dup_n": _count("words per n-gram of the near-duplicate check", "3"),
}


def _check_lists(cfg: DictConfig) -> None:
    """List lengths the ranges cannot express."""
    betas = OmegaConf.select(cfg, "lane.optimizer.betas", default=None)
    if betas is not None and len(betas) != 2:
        raise ConfigError(
            f"`lane.optimizer.betas={list(betas)}` is not valid: it takes two numbers >= 0 and "
            f"< 1, Adam's moment decay rates (e.g. `lane.optimizer.betas=[0.9,0.999]`).",
            key="lane.optimizer.betas")
    caps = OmegaConf.select(cfg, "curriculum.caps", default=None)
    if caps is not None and len(caps) == 0:
        raise ConfigError(
            "`curriculum.caps=[]` is not valid: it takes one max difficulty (1-10) per epoch; "
            "epochs past the last cap keep it (e.g. `curriculum.caps=[4,7,10]`).",
            key="curriculum.caps")


def _unselected(cfg: DictConfig, key: str) -> bool:
    """A key of a section the lane does not read: an objective's other than lane.objective's,
    lane.quantization off method qlora. Not validated (the sections all carry defaults — so
    `lane=dpo lane.method=qlora` has its nf4 section — and only the selected one is read)."""
    parts = key.split(".")
    if len(parts) < 3 or parts[0] != "lane":
        return False
    if parts[1] == "quantization":
        return OmegaConf.select(cfg, "lane.method", default=None) != "qlora"
    if parts[1] not in OBJECTIVES:
        return False
    return parts[1] != (OmegaConf.select(cfg, "lane.objective", default=None) or "sft")


CHOICES = {
    "gate.metric": [AUTO, "pass@1", "pass@k", "loss"],
    "eval.judge": ["teacher"],
    "eval.chat_template": [AUTO, True, False],
    "eval.models[]": ["base", "tuned"],
    "hw.backend": ["auto", "cuda", "mps", "cpu"],
    "hw.strategy": ["auto", "single", "ddp", "fsdp2"],
    "hw.lightning.precision": ["32-true", "bf16-mixed", "bf16-true", "16-mixed"],
    "rung.init": ["pretrained", "random"],
    "spoke.sources[].kind": ["sft", "preference"],
    "data.source": ["spoke", "file", "hf"],
    "data.format": list(DATA_FORMATS),
    "data.collateral": ["spoke", "none"],
    "data.tool_format": ["native", "hermes"],
    "data.on_bad": ["error", "skip"],
    "lane.method": list(METHODS),
    "lane.objective": list(OBJECTIVES),
    "lane.precision": ["auto", "bf16", "fp16", "fp32"],
    "lane.quantization.type": ["nf4", "fp4"],
    "lane.optimizer.name": ["adamw", "adamw_8bit", "sgd"],
    "lane.dpo.loss": list(DPO_LOSSES),
    "lane.grpo.loss_type": list(GRPO_LOSSES),
    "lane.grpo.reward": list(GRPO_REWARDS),
    "lane.grpo.scale_rewards": list(GRPO_SCALES),
    "lane.grpo.generation": ["local", "server"],
    "lane.grpo.importance_sampling_mode": list(GRPO_IS_MODES),
    "train.schedule": ["cosine", "linear", "constant"],
    **{f"train.{k}": ["auto", *v] for k, v in TRAIN_PATHS.items()},
    "logger.kind": ["wandb", "csv", "tensorboard", "none"],
    "serve.device": ["auto", "cpu", "cuda", "mps"],
    "serve.dtype": ["auto", "fp32", "bf16", "fp16"],
    "teacher.tier": list(TEACHER_TIERS),
    "synth.strategy": list(SYNTH_STRATEGIES),
    "curate.verdict": ["passed", "repaired", "unverified"],
}


def _unknown_keys(node, schema, prefix: str) -> Iterable[str]:
    if not isinstance(node, DictConfig) or schema is None or not is_dataclass(schema):
        return
    known = {f.name: f.type for f in fields(schema)}
    for key in node.keys():
        path = f"{prefix}{key}"
        if key not in known:
            yield path
            continue
        child = node._get_node(key)
        child_schema = OmegaConf.get_type(child) if isinstance(child, DictConfig) else None
        if isinstance(child, DictConfig) and not child._is_none() and is_dataclass(child_schema):
            yield from _unknown_keys(child, child_schema, path + ".")
        elif isinstance(child, ListConfig):
            for i, item in enumerate(child):
                if isinstance(item, DictConfig):
                    yield from _unknown_keys(item, OmegaConf.get_type(item), f"{path}[{i}].")
