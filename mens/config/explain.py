"""Hydra's and OmegaConf's exceptions → one actionable paragraph (a ConfigError, exit 2).

Every mens command prints composition errors through `explain`, so no user sees a traceback
unless HYDRA_FULL_ERROR=1. The schema's own key list gives "did you mean" hints.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import fields, is_dataclass
from typing import Iterable

from mens.config.schema import MensConfig
from mens.errors import ConfigError, MensError


def explain(exc: BaseException) -> MensError:
    """Turn a Hydra / OmegaConf composition error into one actionable paragraph."""
    if isinstance(exc, MensError):
        return exc
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

    cause = exc.__cause__ or exc.__context__
    text = str(exc)
    if isinstance(exc, MissingConfigException):
        m = re.search(r"Could not find '([^']+)/([^']+)'", text)
        options = re.findall(r"^\s+(\S+)\s*$", text.split("Available options", 1)[-1], re.M) \
            if "Available options" in text else []
        if m:
            group, option = m.groups()
            near = difflib.get_close_matches(option, options, n=1)
            hint = f" Did you mean `{group}={near[0]}`?" if near else ""
            return ConfigError(
                f"Unknown option `{option}` in config group `{group}`.{hint} "
                f"Available: {', '.join(options) or '(none)'} (files in "
                f"{'recipes/' if group == 'recipe' else f'conf/{group}/'}, or ./conf/{group}/ here).",
                key=group)
        return ConfigError(f"Missing config: {text.strip()}")
    if isinstance(exc, OverrideParseException):
        return ConfigError(f"Cannot parse the override: {text.strip()} Overrides look like "
                           f"`key=value`, `+group=option` or `group=a,b` with -m.")
    for err in (cause, exc):
        if isinstance(err, ValidationError):
            key = getattr(err, "full_key", None) or _full_key(str(err))
            first = str(err).splitlines()[0]
            return ConfigError(
                f"Wrong type for `{key}`: {first}. Give a value of the schema's type "
                f"(see mens/config/schema.py or `python -m mens.plan --cfg job`).", key=key)
        if isinstance(err, ConfigKeyError):
            key = getattr(err, "full_key", None) or _full_key(str(err))
            return unknown_key_error(key)
    m = re.search(r"Could not override '([^']+)'", text)
    if m and "No match in the defaults list" in text:
        return ConfigError(
            f"`{m.group(1)}` is not in the defaults list, so it is chosen with a plus: write "
            f"`+{m.group(1)}=...` (hw, rung and recipe work this way).", key=m.group(1))
    if m:
        return unknown_key_error(m.group(1))
    m = re.search(r"Multiple values for (\S+?)\.", text)
    if m:
        return ConfigError(
            f"`{m.group(1)}` is chosen twice (e.g. by a recipe and by `+{m.group(1)}=...`): "
            f"to replace a recipe's choice drop the plus (`{m.group(1)}=NAME`).", key=m.group(1))
    if "Could not append to config" in text:
        return ConfigError(
            f"{text.strip().splitlines()[0]} Use `+group=option` only for hw, rung and recipe "
            f"(not in the defaults list); use `group=option` for spoke, lane and curriculum.")
    if isinstance(err := cause or exc, OmegaConfBaseException) or "hydra" in type(exc).__module__:
        return ConfigError(" ".join(str(err).split()))
    raise exc


def _full_key(text: str) -> str | None:
    m = re.search(r"full_key:\s*(\S+)", text)
    return m.group(1) if m else None


def unknown_key_error(key: str | None) -> ConfigError:
    if key == "lane.kind":   # a lane option file from before a lane was method × objective
        return ConfigError(
            "`lane.kind` is a retired key: a lane is `method` (lora | qlora | full) × "
            "`objective` (sft | dpo | orpo | simpo | kto | grpo). In the lane's option file write "
            "`method: lora` for `kind: lora` (qlora, full alike), and `method: lora` plus "
            "`objective: dpo` for `kind: dpo`.", key="lane.kind")
    near = difflib.get_close_matches(key or "", list(schema_keys()), n=1, cutoff=0.6)
    hint = f" Did you mean `{near[0]}`?" if near else ""
    return ConfigError(
        f"Unknown config key `{key}`: the mens schema defines no such key.{hint} "
        f"Fix its spelling; `python -m mens.plan --cfg job` lists every key.", key=key)


def schema_keys(schema=MensConfig, prefix: str = "") -> Iterable[str]:
    """Every dotted key the schema defines (for 'did you mean')."""
    from mens.config import schema as s

    subs = {"hw": s.HwConfig, "rung": s.RungConfig, "spoke": s.SpokeConfig,
            "lane": s.LaneConfig, "curriculum": s.CurriculumConfig, "lora": s.LoraConfig,
            "quantization": s.QuantConfig, "dpo": s.DpoConfig, "admission": s.AdmissionConfig}
    for f in fields(schema):
        yield prefix + f.name
        default = f.default_factory() if callable(f.default_factory) else f.default
        sub = default if is_dataclass(default) else subs.get(f.name)
        if sub is not None and prefix.count(".") < 2:
            yield from schema_keys(type(sub) if not isinstance(sub, type) else sub,
                                   prefix + f.name + ".")
