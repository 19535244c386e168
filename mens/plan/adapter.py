"""`adapter=`: a pushed (or local) PEFT adapter becomes the run's starting point.

The adapter is fetched (mens.source.hub.fetch_adapter: a Hub repo, pinned to its commit, or a
local dir), checked against the rung's linear shapes from its safetensors header alone (no torch:
planning stays instant), and made `train.init_adapter`. Eval, export and serve read the same
reference. It lives in plan because the check needs the architecture (mens.plan.memory.Arch).
"""
from __future__ import annotations

from pathlib import Path

from mens.errors import ConfigError
from mens.resources import ASSETS
from mens.source.families import family


def resolve_adapter(cfg, notes: list[str]) -> dict | None:
    """`adapter=` (a Hub repo or a local dir): fetched (mens.source.hub.fetch_adapter), checked
    against the rung's architecture, and made the run's `train.init_adapter`; a Hub ref is pinned
    to its commit (`org/name@<commit>`) so spec.yaml's rerun/resume loads the same snapshot. The
    adapter's LoRA shape (r, alpha, targets, and on a mixture of experts whether it adapts the
    router and the experts) replaces lane.lora's, said: PEFT trains the loaded adapter as it
    is, so the planner must count those. Returns the source, or None."""
    if not cfg.adapter:
        return None
    if cfg.train.init_adapter:
        raise ConfigError(f"adapter={cfg.adapter} and train.init_adapter="
                          f"{cfg.train.init_adapter} both name the adapter to start from: keep "
                          f"one (`adapter=` takes a Hub repo or a local dir).", key="adapter")
    if cfg.lane.method == "full":
        raise ConfigError(f"adapter={cfg.adapter} is a LoRA adapter, and lane.method=full trains "
                          f"every weight without one: use lane.method=lora (or qlora) to continue "
                          f"it, or drop adapter=.", key="adapter")
    from mens.config.schema import LORA_TARGETS
    from mens.source.hub import fetch_adapter

    path, source = fetch_adapter(cfg.adapter)
    acfg = check_adapter_fits(path, cfg.rung, cfg.adapter)
    lora, fam = cfg.lane.lora, family(cfg.rung.family)
    theirs = {"r": acfg.get("r"), "alpha": acfg.get("lora_alpha"),
              "dropout": acfg.get("lora_dropout"), "targets": acfg.get("target_modules"),
              **_moe_parts(acfg, fam)}
    for k, v in theirs.items():
        if k == "targets" and isinstance(v, list):
            # a MoE's router is planned through lane.lora.router (theirs["router"])
            planned = {*LORA_TARGETS, *((fam.router,) if fam.experts else ())}
            if set(v) - planned:
                notes.append(f"adapter: targets {_show(sorted(set(v) - planned))} "
                             f"are not planned (mens plans {_show(LORA_TARGETS)})")
            v = [t for t in LORA_TARGETS if t in v]   # the schema's order (PEFT saves a set)
        if v is None or isinstance(v, str) or v == (list(lora[k]) if k == "targets" else lora[k]):
            continue
        notes.append(f"adapter: lane.lora.{k} {_show(lora[k])} → {_show(v)}, the adapter's own "
                     f"(it trains as it was saved)")
        lora[k] = v
    cfg.train.init_adapter = str(path)
    if "commit" in source:
        cfg.adapter = f"{source['repo_id']}@{source['commit']}"
        notes.append(f"adapter: {source['repo_id']}@{source['revision'] or 'main'} is commit "
                     f"{source['commit']} ({path})")
    return source


def _moe_parts(acfg: dict, fam) -> dict:
    """Whether a saved adapter adapts a mixture of experts' router (a target module, or the
    router's weight as a target parameter: how mens's trainer asks PEFT for it) and its fused
    experts (target parameters): lane.lora.router / lane.lora.experts as the adapter has them.
    Empty for a dense family or a target_modules regex (nothing to read)."""
    modules, params = acfg.get("target_modules"), acfg.get("target_parameters") or []
    if not fam.experts or isinstance(modules, str):
        return {}
    names = {*(modules or []), *(p.removesuffix(".weight").rsplit(".", 1)[-1] for p in params)}
    return {"router": fam.router in names,
            "experts": any(p.endswith(e) for p in params for e in fam.experts)}


def _show(v) -> str:
    return str(v) if isinstance(v, (str, int, float)) else ",".join(map(str, v))


def _rung_for(base: str) -> str:
    """The override that serves an adapter's base_model_name_or_path."""
    p = Path(base)
    if p.parent == ASSETS or p.parent.resolve() == ASSETS.resolve():
        return f"`+rung={p.name}`"            # an embedded rung, saved by its package path
    if p.is_absolute() or p.is_dir():
        return f"`+rung=hf rung.path={base}`"
    return f"`+rung=hf rung.repo_id={base}`"


def check_adapter_fits(adapter_dir, rung, ref: str) -> dict:
    """The adapter's LoRA matrices against the rung's linear shapes (safetensors header only: no
    torch). A mismatch is a ConfigError naming both the adapter's base and the rung. Returns the
    adapter's config (adapter_config.json)."""
    import json
    import struct

    from mens.plan.memory import Arch

    adapter_dir = Path(adapter_dir)
    acfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    base = acfg.get("base_model_name_or_path") or "an unnamed base"
    rung_label = f"rung {rung.name} ({rung.path or rung.repo_id})"
    if acfg.get("peft_type", "LORA") != "LORA":
        raise ConfigError(f"adapter={ref} is a {acfg.get('peft_type')} adapter; mens trains, "
                          f"exports and serves LoRA adapters only.", key="adapter")
    st = adapter_dir / "adapter_model.safetensors"
    if not st.is_file():   # a .bin adapter: PEFT reports a mismatch when it loads
        return acfg
    try:
        with open(st, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
    except (OSError, ValueError, struct.error) as e:
        raise ConfigError(f"adapter={ref}: {st} is not a readable safetensors file ({e}); fetch "
                          f"it again (delete it from the hub cache) or re-save the adapter.",
                          key="adapter") from None
    shapes = Arch.of(rung).linear_shapes()   # every linear layer of the family, by name
    layers = int(rung.num_hidden_layers)
    for key, meta in header.items():
        parts = key.split(".")
        if key == "__metadata__" or len(parts) < 4 or parts[-3] not in shapes:
            continue
        module, which = parts[-3], parts[-2]          # …layers.3.self_attn.q_proj.lora_A.weight
        layer = next((int(parts[i + 1]) for i, p in enumerate(parts[:-1])
                      if p == "layers" and parts[i + 1].isdigit()), 0)
        din, dout = shapes[module]
        got = meta["shape"]
        bad = (layer >= layers) or (which == "lora_A" and got[1] != din) or \
            (which == "lora_B" and got[0] != dout)
        if bad:
            have = f"layer {layer}" if layer >= layers else \
                f"{module} {'input' if which == 'lora_A' else 'output'} " \
                f"{got[1] if which == 'lora_A' else got[0]}"
            want = f"{layers} layers" if layer >= layers else \
                f"{din if which == 'lora_A' else dout}"
            raise ConfigError(
                f"adapter={ref} (trained on {base}) does not fit {rung_label}: the adapter has "
                f"{have} where {rung.name} has {want}. Use the adapter's own base "
                f"({_rung_for(base)}) or an adapter trained on {rung.name}.", key="adapter")
    return acfg
