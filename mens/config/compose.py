"""Composition: Hydra overrides → a validated DictConfig.

Hydra already checks types against mens/config/schema.py. This module adds what Hydra does not:
the default `+hw=auto` / `+rung=tiny` (those groups stay out of the defaults list so that
`+hw=m_series` works as the user types it), rejection of keys the schema does not define
(`+train.seq_lenn=512` is accepted silently by Hydra) and bad values (mens.config.validate), the
shipped recipes as the `recipe` group, and the working directory's ./conf on the search path.
"""
from __future__ import annotations

from typing import Sequence

from omegaconf import DictConfig, OmegaConf

from mens.config.explain import explain
from mens.config.validate import validate
from mens.resources import CONF_DIR, RECIPES_DIR, USER_CONF, option_path

DEFAULT_GROUPS = {"hw": "auto", "rung": "tiny"}


def default_overrides(overrides: Sequence[str]) -> list[str]:
    """Append `+hw=auto` / `+rung=tiny` unless the overrides (or a recipe) choose them, and
    the working directory's ./conf to Hydra's search path (a user's own option files and
    recipes beside their data; a shipped option of the same name is found first)."""
    out = retired_overrides(overrides)
    register_recipes(out)
    user = USER_CONF.resolve()
    if user.is_dir() and user != CONF_DIR.resolve() and \
            not any(o.startswith("hydra.searchpath=") for o in out):
        out.append(f"hydra.searchpath=[file://{user}]")
    recipe_groups = _recipe_groups(out)
    for group, option in DEFAULT_GROUPS.items():
        chosen = any(o.lstrip("+~").split("=", 1)[0] in (group, f"{group}@{group}") for o in out)
        if not chosen and group not in recipe_groups:
            out.append(f"+{group}={option}")
    return out


def retired_overrides(overrides: Sequence[str]) -> list[str]:
    """`lane.kind=X` (before a lane was method × objective) → the keys that replace it, said in
    one line: lora|qlora|full → lane.method; dpo → lane.method=lora lane.objective=dpo."""
    import sys

    from mens.config.objectives import kind_to_keys

    out = []
    for o in overrides:
        key, eq, value = o.partition("=")
        if eq and key.lstrip("+~") == "lane.kind":
            keys = [f"lane.{k}={v}" for k, v in kind_to_keys(value.strip()).items()]
            print(f"mens: note: `{o}` is a retired key (a lane is lane.method × lane.objective): "
                  f"read as {' '.join(keys)}", file=sys.stderr)
            out += keys
        else:
            out.append(o)
    return out


def _recipe_names(overrides: Sequence[str]) -> list[str]:
    names = []
    for o in overrides:
        key, _, value = o.lstrip("+").partition("=")
        if key == "recipe":
            names += [v.strip() for v in value.split(",")]   # sweeps: every recipe in the list
    return names


def register_recipes(overrides: Sequence[str]) -> None:
    """The shipped recipes (mens.recipes, a package of its own: no symlink into conf/) as the
    `recipe` config group, in Hydra's ConfigStore. Only the named ones are read — start-up time
    counts — unless a name is not shipped, when all are, so the error can list them."""
    from hydra.core.config_store import ConfigStore

    wanted = _recipe_names(overrides)
    shipped = {p.stem: p for p in RECIPES_DIR.glob("*.yaml")}
    if any(n not in shipped for n in wanted):
        wanted = list(shipped)
    store = ConfigStore.instance()
    for name in wanted:
        text = shipped[name].read_text() if name in shipped else None
        if text is None or store.repo.get("recipe", {}).get(f"{name}.yaml"):
            continue
        package = next((line.split("@package", 1)[1].strip() for line in text.splitlines()
                        if line.startswith("# @package")), None)
        store.store(group="recipe", name=name, node=OmegaConf.create(text), package=package)


def _recipe_groups(overrides: Sequence[str]) -> set[str]:
    """Groups that a `+recipe=NAME` adds through its own defaults list (`/hw: h100` lines)."""
    groups: set[str] = set()
    for name in _recipe_names(overrides):
        path = option_path("recipe", name)
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

    from mens.config.schema import register

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
