"""Composition: Hydra overrides → a validated DictConfig.

Hydra already checks types against mens/schema.py. This module adds what Hydra does not:
the default `+hw=auto` / `+rung=tiny` (those groups stay out of the defaults list so that
`+hw=m_series` works as the user types it), rejection of keys the schema does not define
(`+train.seq_lenn=512` is accepted silently by Hydra), and checks of the `auto`-able knobs.
"""
from __future__ import annotations

import difflib
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Iterable, Sequence

from omegaconf import DictConfig, ListConfig, OmegaConf

from mens.errors import ConfigError
from mens.schema import AUTO, AUTO_INTS, MensConfig

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
DEFAULT_GROUPS = {"hw": "auto", "rung": "tiny"}


def default_overrides(overrides: Sequence[str]) -> list[str]:
    """Append `+hw=auto` / `+rung=tiny` unless the overrides (or a recipe) choose them."""
    out = list(overrides)
    recipe_groups = _recipe_groups(out)
    for group, option in DEFAULT_GROUPS.items():
        chosen = any(o.lstrip("+~").split("=", 1)[0] in (group, f"{group}@{group}") for o in out)
        if not chosen and group not in recipe_groups:
            out.append(f"+{group}={option}")
    return out


def _recipe_groups(overrides: Sequence[str]) -> set[str]:
    """Groups that a `+recipe=NAME` adds through its own defaults list (`/hw: h100` lines)."""
    groups: set[str] = set()
    for o in overrides:
        key, _, value = o.lstrip("+").partition("=")
        if key != "recipe":
            continue
        for name in value.split(","):  # sweeps: every recipe in the list
            path = CONF_DIR / "recipe" / f"{name}.yaml"
            if path.is_file():
                conf = OmegaConf.load(path)
                for item in conf.get("defaults", []) or []:
                    if isinstance(item, (dict, DictConfig)):
                        for k in item:
                            groups.add(str(k).replace("override ", "").strip("/ ").split("@")[0])
    return groups


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """Compose with Hydra's compose API (tests, `rerun`), then validate. Raises ConfigError."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from mens.errors import explain
    from mens.schema import register

    register()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = hydra_compose("mens", overrides=default_overrides(overrides))
    except Exception as e:  # Hydra/OmegaConf errors → one paragraph, exit 2
        raise explain(e) from e
    finally:
        GlobalHydra.instance().clear()
    validate(cfg)
    return cfg


def validate(cfg: DictConfig) -> None:
    """Reject keys the schema does not define and bad values of `auto`-able knobs."""
    unknown = list(_unknown_keys(cfg, MensConfig, ""))
    if unknown:
        key = unknown[0]
        near = difflib.get_close_matches(key, list(schema_keys()), n=1, cutoff=0.6)
        hint = f" Did you mean `{near[0]}`?" if near else ""
        raise ConfigError(
            f"Unknown config key `{key}`: the mens schema defines no such key.{hint} "
            f"Remove it or fix its spelling; `python -m mens.plan --cfg job` shows every key.",
            key=key)
    for key in AUTO_INTS:
        value = OmegaConf.select(cfg, key)
        if value == AUTO:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(
                f"`{key}={value}` is not valid: it takes `auto` or a positive integer "
                f"(e.g. `{key}=auto` lets the planner choose).", key=key)
    lr = OmegaConf.select(cfg, "lane.optimizer.lr")
    if lr != AUTO and (isinstance(lr, bool) or not isinstance(lr, (int, float)) or lr <= 0):
        raise ConfigError(
            f"`lane.optimizer.lr={lr}` is not valid: it takes `auto` (the rung's recommended "
            f"rate) or a positive number such as 2e-4.", key="lane.optimizer.lr")
    gc = OmegaConf.select(cfg, "lane.gradient_checkpointing")
    if gc not in (AUTO, True, False):
        raise ConfigError(
            f"`lane.gradient_checkpointing={gc}` is not valid: use auto, true or false.",
            key="lane.gradient_checkpointing")
    for key, allowed in _CHOICES.items():
        value = OmegaConf.select(cfg, key)
        if value not in allowed:
            near = difflib.get_close_matches(str(value), allowed, n=1)
            hint = f" (did you mean `{near[0]}`?)" if near else ""
            raise ConfigError(
                f"`{key}={value}` is not valid{hint}: it takes one of {', '.join(allowed)}.",
                key=key)


_CHOICES = {
    "hw.backend": ["auto", "cuda", "mps", "cpu"],
    "rung.init": ["pretrained", "random"],
    "lane.kind": ["lora", "qlora", "full", "dpo"],
    "lane.precision": ["auto", "bf16", "fp16", "fp32"],
    "lane.optimizer.name": ["adamw", "adamw_8bit", "sgd"],
    "train.schedule": ["cosine", "linear", "constant"],
    "logger": ["wandb", "csv", "none"],
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


def schema_keys(schema=MensConfig, prefix: str = "") -> Iterable[str]:
    """Every dotted key the schema defines (for 'did you mean')."""
    for f in fields(schema):
        yield prefix + f.name
        default = f.default_factory() if callable(f.default_factory) else f.default
        sub = default if is_dataclass(default) else _SUBSCHEMAS.get(f.name)
        if sub is not None and prefix.count(".") < 2:
            yield from schema_keys(type(sub) if not isinstance(sub, type) else sub,
                                   prefix + f.name + ".")


def _subschemas():
    from mens import schema as s
    return {"hw": s.HwConfig, "rung": s.RungConfig, "spoke": s.SpokeConfig,
            "lane": s.LaneConfig, "curriculum": s.CurriculumConfig, "lora": s.LoraConfig,
            "quantization": s.QuantConfig, "dpo": s.DpoConfig, "admission": s.AdmissionConfig}


_SUBSCHEMAS = _subschemas()
