"""Single option files read fast, as frozen schema dataclasses (for the planner's ways out,
auto-tier defaults and the list of spokes). Plain YAML + dataclasses: OmegaConf is ~10x slower,
and these files are validated by the composition tests anyway."""
from __future__ import annotations

from dataclasses import fields, is_dataclass, make_dataclass
from functools import lru_cache

import yaml

from mens.config import schema
from mens.resources import option_names, option_path

MISSING_VALUE = object()
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml when present: ~10x faster
SCHEMAS = {"hw": "HwConfig", "rung": "RungConfig", "spoke": "SpokeConfig", "lane": "LaneConfig",
           "curriculum": "CurriculumConfig"}


@lru_cache(maxsize=None)
def _frozen_type(cls):
    return make_dataclass(cls.__name__.replace("Config", "Spec"),
                          [(f.name, f.type) for f in fields(cls)], frozen=True)


def freeze(obj):
    """A schema dataclass instance → its frozen twin (lists become tuples)."""
    if is_dataclass(obj):
        return _frozen_type(type(obj))(**{f.name: freeze(getattr(obj, f.name)) for f in fields(obj)})
    if isinstance(obj, (list, tuple)):
        return tuple(freeze(v) for v in obj)
    return obj


def load_option(group: str, name: str):
    """One option file as its (read-only, frozen) schema dataclass."""
    # cached by the file it resolves to: a user's ./conf option depends on the working directory
    return _load(group, option_path(group, name).resolve())


@lru_cache(maxsize=None)
def _load(group: str, path):
    cls = getattr(schema, SCHEMAS[group])
    with open(path) as f:
        return freeze(_build(cls, yaml.load(f, Loader=SafeLoader)))


def _build(cls, raw: dict):
    kwargs = {}
    for f in fields(cls):
        value = raw.get(f.name, MISSING_VALUE)
        default = f.default_factory() if callable(f.default_factory) else f.default
        if value is MISSING_VALUE:
            value = default
        elif isinstance(value, dict) and is_dataclass(default):
            value = _build(type(default), value)
        kwargs[f.name] = value
    return cls(**kwargs)


def spokes() -> list[str]:
    """The shipped spokes' names, sorted."""
    return option_names("spoke")
