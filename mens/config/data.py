"""What is trained on: the `spoke` (a shipped domain corpus and its admission check), the `data`
group (spoke | file | hf, mens.data.sources) and the `curriculum` (difficulty caps per epoch),
with their valid values."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from mens.config.ranges import Range, count, nonneg


@dataclass
class SourceConfig:
    name: str = MISSING
    weight: float = MISSING          # mix weight; normalised over the spoke's sources
    path: str = MISSING              # JSONL under the spoke's corpus folder
    kind: str = "sft"                # sft | preference


@dataclass
class AdmissionConfig:
    check: str = MISSING             # name of the validator that guards this spoke's records
    tool: Optional[str] = None       # external tool the check needs (if absent: record unverified)
    description: str = ""


@dataclass
class SpokeConfig:
    name: str = MISSING
    domain: str = MISSING            # one-line domain profile
    profile: List[str] = field(default_factory=list)   # what the spoke teaches
    min_rating: float = 3.0
    preference_pairs: bool = False   # ships chosen/rejected pairs (dpo lane needs them)
    seq_len_hint: int = 1024         # declared target, used only when no length manifest exists
    sources: List[SourceConfig] = field(default_factory=list)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    # the one system prompt of the spoke: synthesis asks for answers under it, training adds it
    # where a record has none (data.system_prompt wins), serving uses it as the slot's default
    system_prompt: Optional[str] = None


DATA_FORMATS = ("auto", "messages", "sharegpt", "alpaca", "prompt_completion", "text",
                "preference")


@dataclass
class DataConfig:
    # the `data` group: `data=spoke` (the spoke's shipped corpus, the default), `data=file
    # data.path=…` or `data=hf data.name=org/ds` (mens.data.sources)
    source: str = MISSING            # spoke | file | hf
    path: Any = None                 # file: a path, a list of paths, or a glob (jsonl json parquet csv)
    name: Optional[str] = None       # hf: the dataset id (org/name)
    split: str = "train"             # hf: the split trained on
    revision: Optional[str] = None   # hf: a branch, tag or commit (null: main)
    format: str = "auto"             # auto (from the columns) | one of DATA_FORMATS
    columns: Dict[str, str] = field(default_factory=dict)   # mens field -> the data's column name
    system_prompt: Optional[str] = None   # prepended as a system turn where a record has none
    chat_template: Optional[str] = None   # a .jinja file or `chatml`: for a model without one
    enable_thinking: bool = False    # the template option (Qwen3): train and serve alike
    eval_path: Any = None            # a held-out file (file) or split name (hf); null: eval_fraction
    eval_fraction: float = 0.05      # held out by a hash of each record (stable as the file grows)
    min_rating: Optional[float] = None   # records with a `rating` below it are dropped
    tags: List[str] = field(default_factory=list)   # keep records with any of these `tags`
    dedup: bool = True               # remove exact duplicates (counted)
    decontam_n: int = 13             # n-gram size (words) of the eval-vs-train check; 0: off
    decontam_threshold: float = 0.5  # an eval record sharing this fraction of its n-grams is removed
    collateral: str = "spoke"        # spoke: also score the spoke's held-out split | none
    tools: Optional[str] = None      # a JSON/JSONL file of tool schemas for records listing none
    tool_format: str = "native"      # native: the template's own tool syntax | hermes (<tool_call>)
    on_bad: str = "error"            # a record that fits no format: error (exit 2) | skip (counted)


@dataclass
class CurriculumConfig:
    name: str = MISSING
    epochs: int = MISSING
    caps: List[int] = MISSING        # max difficulty (1-10) seen in epoch e; len == epochs
    phases: List[str] = field(default_factory=lambda: [
        "warmup", "syntax", "reasoning", "tool_call", "multi_turn", "orchestration", "agentic"])
    # how many phases apart two records may share a packed row (mens.data.pack): null = any
    # (the least padding), 0 = a row holds one phase's records
    pack_window: Optional[int] = None


# Every number of these sections and its valid values (mens.config.validate): null is accepted
# wherever the field is Optional (its meaning is in the note); `[]`: every list item.
RANGES = {
    "spoke.min_rating": Range(lo=0, hi=5, example="3",
                              note="records are rated 1 to 5; lower ones are dropped"),
    "spoke.seq_len_hint": count("tokens, used when the spoke has no length manifest", "1024"),
    "spoke.sources[].weight": nonneg("mix weight, normalised over the spoke's sources; "
                                     "0 leaves a source out", "0.5"),
    "data.min_rating": Range(lo=0, hi=5, example="3",
                             note="records with a `rating` below it are dropped; null keeps all"),
    "data.eval_fraction": Range(lo=0, hi=1, lo_open=True, hi_open=True, example="0.05",
                                note="the share of records held out (by record hash)"),
    "data.decontam_n": nonneg("words per n-gram of the decontamination check; 0 turns it off",
                              "13"),
    "data.decontam_threshold": Range(lo=0, hi=1, lo_open=True, example="0.5",
                                     note="the share of an eval record's n-grams found in "
                                          "train that removes it"),
    "curriculum.epochs": count("", "3"),
    "curriculum.pack_window": Range(lo=0, integer=True, example="2",
                                    note="how many phases apart two records may share a packed "
                                         "row; null: any, 0: none"),
    "curriculum.caps[]": Range(lo=1, hi=10, integer=True, example="[4,7,10]",
                               note="the max difficulty (1-10) of the records an epoch sees"),
}
# The strings with a fixed set of values
CHOICES = {
    "spoke.sources[].kind": ["sft", "preference"],
    "data.source": ["spoke", "file", "hf"],
    "data.format": list(DATA_FORMATS),
    "data.collateral": ["spoke", "none"],
    "data.tool_format": ["native", "hermes"],
    "data.on_bad": ["error", "skip"],
}
