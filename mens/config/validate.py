"""Validation of a composed config: what Hydra's type checks do not catch.

Keys the schema does not define (Hydra accepts `+train.seq_lenn=512` silently), the `auto`-able
knobs, every number's valid values (RANGES: `hw.memory_gb=-3` is a ConfigError naming the key,
not a plan for -3 GiB), string choices (CHOICES) — both tables gathered from the stages' modules,
where each sits beside its dataclasses; of the lane's sections only those it reads are checked (its
objective's, with its card's own check, and lane.quantization on method qlora). Each error
is one paragraph naming the key, the value and an example of a good one (exit 2).
"""
from __future__ import annotations

import difflib
import math
from dataclasses import fields, is_dataclass
from typing import Iterable

from omegaconf import DictConfig, ListConfig, OmegaConf

from mens.config import data, gate, hw, lane, launch, publish, rung, synth, train
from mens.config.cards import CARDS
from mens.config.cards.distill import teacher_source  # noqa: F401  (re-exported: its old home)
from mens.config.explain import unknown_key_error
from mens.config.ranges import AUTO, Range, show
from mens.config.schema import AUTO_INTS, OBJECTIVES, MensConfig
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
                    f"`{where}={show(value)}` is not valid: it takes {rule.describe()}"
                    f"{f' — {rule.note}' if rule.note else ''} (e.g. "
                    f"`{_override_key(key, where, rule.example)}={rule.example}`).", key=where)
    _check_lists(cfg)
    objective = CARDS.get(OmegaConf.select(cfg, "lane.objective", default=None) or "sft")
    if objective is not None and objective.check is not None:
        objective.check(cfg)   # what its card checks besides ranges (distill: the teacher)


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


# Every number in the schema and its valid values, gathered from the stages' modules (each
# beside its dataclasses). Null is accepted wherever the schema's field is Optional (its meaning
# is in the note); `[]`: every list item.
RANGES: dict[str, Range] = {**hw.RANGES, **rung.RANGES, **data.RANGES, **lane.RANGES,
                            **train.RANGES, **gate.RANGES, **publish.RANGES, **launch.RANGES,
                            **synth.RANGES}
# The strings with a fixed set of values, gathered the same way
CHOICES = {**gate.CHOICES, **hw.CHOICES, **rung.CHOICES, **data.CHOICES, **lane.CHOICES,
           **train.CHOICES, **publish.CHOICES, **synth.CHOICES}


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
