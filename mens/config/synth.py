"""The data studio: the `teacher` cascade (mens.synth.teacher), and `tree`, `synth`, `curate`
(mens.synth), with their valid values."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from omegaconf import MISSING

from mens.config.ranges import Range, count, nonneg, pos


# --- teachers for the data studio (issue #15): `teacher=` group, mens.synth.teacher.routing
TEACHER_CAPABILITIES = ("json_schema",)   # json_schema: honours response_format's json_schema


# the shipped conf/teacher options, and `custom` for a user's own file with `candidates:`
TEACHER_TIERS = ("free", "efficient", "balanced", "genius", "auto", "endpoint", "local", "custom")


@dataclass
class TeacherEndpoint:
    # one candidate of a cascade: an OpenAI-compatible chat endpoint and what it costs
    name: str = MISSING              # the label in stats and errors (e.g. openai-gpt-5-mini)
    base_url: str = MISSING          # e.g. https://api.openai.com/v1, http://127.0.0.1:11434/v1
    model: str = MISSING             # the model id the endpoint knows
    api_key_env: Optional[str] = None   # the NAME of the env var holding the key (never the key)
    price_in_per_mtok: Optional[float] = None    # USD per million prompt tokens; null: unknown
    price_out_per_mtok: Optional[float] = None   # USD per million completion tokens; null: unknown
    price_date: Optional[str] = None     # when the price was read (YYYY-MM-DD)
    price_source: Optional[str] = None   # where it was read (a URL)
    capabilities: List[str] = field(default_factory=list)   # TEACHER_CAPABILITIES it has


@dataclass
class TeacherConfig:
    tier: str = MISSING              # TEACHER_TIERS (custom: a user's conf/teacher/NAME.yaml)
    candidates: List[TeacherEndpoint] = field(default_factory=list)   # tried in order
    # teacher=endpoint: the one endpoint (base_url and model required)
    base_url: Optional[str] = None
    model: Optional[str] = None
    api_key_env: Optional[str] = None   # the NAME of the env var holding the key
    prefer_local: bool = False       # conf/teacher/local.yaml's candidates go first
    concurrency: int = 4             # requests in flight at once
    max_retries: int = 4             # mens's own retries of 429 / 5xx / timeouts (openai's: 0)
    backoff_s: float = 1.0           # first retry's wait; doubles each time (Retry-After wins)
    timeout_s: float = 120.0         # per request
    temperature: float = 0.7
    max_tokens: int = 4096           # per reply


# Prompt strategies of `mens data synth` (mens.synth.synth)
SYNTH_STRATEGIES = ("zero_shot", "few_shot_seed", "cot_distill", "oracle_repair")


@dataclass
class TreeConfig:
    """`mens data tree expand|prune|add|regen` (mens.synth.tree): the dataset's tree.yaml."""
    depth: int = 3                   # expand: levels below the root
    branching: int = 4               # expand: subtopics asked for per node
    node: Optional[str] = None       # prune / add / regen: the node id it acts on
    label: Optional[str] = None      # add: the new child's label
    description: str = ""            # add: the new child's description


@dataclass
class SynthConfig:
    """`mens data synth` (mens.synth.synth): leaf-conditioned synthesis into a dataset dir."""
    out: Optional[str] = None        # the dataset dir; null: datasets/<spoke>
    per_leaf: int = 8                # samples asked for per leaf
    strategy: str = "zero_shot"      # SYNTH_STRATEGIES
    repair_turns: int = 2            # repair turns after an oracle failure (0: none)
    seed_examples: int = 3           # few_shot_seed / oracle_repair: k examples of the spoke
    keep_reasoning: bool = False     # cot_distill: keep the reasoning in the trained answer
    seed: int = 0                    # sent to the teacher (endpoints that honour it) and for picks
    oracle_timeout_s: float = 10.0   # per candidate, in the oracle's child process
    oracle_memory_mb: int = 1024     # the oracle child's address-space limit
    tools: Optional[str] = None      # a JSON/JSONL file of tool schemas: tool-using records, every call validated (jsonschema)


@dataclass
class CurateConfig:
    """`mens data curate list|rate|tag|untag|edit|clean` (mens.synth.curate)."""
    topic: Optional[str] = None      # filter: topic path prefix (`loops` or `shell/loops`)
    tag: Optional[str] = None        # filter: records with this tag
    verdict: Optional[str] = None    # filter: passed | repaired | unverified
    min_rating: Optional[float] = None   # filter: rating >= this (unrated records do not match)
    id: Optional[str] = None         # filter: one record id
    rating: Optional[int] = None     # rate: the 1-5 rating to set
    tags: List[str] = field(default_factory=list)   # tag / untag: the tags to add / remove
    response: Optional[str] = None   # edit: the new assistant answer (the original is kept)
    near_dup: float = 0.8            # clean: Jaccard of word n-grams at which a record is a near-duplicate
    near_dup_n: int = 3              # clean: n-gram size (words) of the near-duplicate check
    eval: List[str] = field(default_factory=list)   # clean: more eval files to decontaminate against


# Every number of these sections and its valid values (mens.config.validate): null is accepted
# wherever the field is Optional (its meaning is in the note); `[]`: every list item.
RANGES = {
    "teacher.concurrency": count("teacher requests in flight at once", "4"),
    "teacher.max_retries": Range(lo=0, integer=True, example="4",
                                 note="retries of a 429 / 5xx / timeout before the next candidate"),
    "teacher.backoff_s": nonneg("seconds before the first retry; doubles each time", "1"),
    "teacher.timeout_s": pos("seconds one teacher request may take", "120"),
    "teacher.temperature": Range(lo=0, hi=2, example="0.7", note="the sampling temperature"),
    "teacher.max_tokens": count("tokens per teacher reply", "4096"),
    "teacher.candidates[].price_in_per_mtok": nonneg(
       "USD per million prompt tokens; null: unknown (cost recorded as null)", "0.4"),
    "teacher.candidates[].price_out_per_mtok": nonneg(
       "USD per million completion tokens; null: unknown (cost recorded as null)", "1.6"),
    "tree.depth": count("levels of the topic tree below its root", "3"),
    "tree.branching": count("subtopics asked for per node", "4"),
    "synth.per_leaf": count("samples asked for per leaf", "8"),
    "synth.repair_turns": Range(lo=0, hi=10, integer=True, example="2",
                                note="repair turns after an oracle failure (0: none)"),
    "synth.seed_examples": count("seed examples shown per request", "3"),
    "synth.seed": Range(lo=0, integer=True, example="0",
                        note="the seed sent to the teacher and used for seed-example picks"),
    "synth.oracle_timeout_s": pos("seconds the oracle may take per candidate", "10"),
    "synth.oracle_memory_mb": Range(lo=64, integer=True, example="1024",
                                    note="MB of address space for the oracle's child process"),
    "curate.min_rating": Range(lo=1, hi=5, example="4", note="the lowest rating kept by the filter"),
    "curate.rating": Range(lo=1, hi=5, integer=True, example="4", note="the rating to set (1-5)"),
    "curate.near_dup": Range(lo=0, hi=1, lo_open=True, example="0.8",
                             note="the n-gram Jaccard similarity of a near-duplicate"),
    "curate.near_dup_n": count("words per n-gram of the near-duplicate check", "3"),
}
# The strings with a fixed set of values
CHOICES = {
    "teacher.tier": list(TEACHER_TIERS),
    "synth.strategy": list(SYNTH_STRATEGIES),
    "curate.verdict": ["passed", "repaired", "unverified"],
}
