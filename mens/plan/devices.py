"""The devices a run trains on: `hw.devices` resolved (every visible CUDA device, or one), the
world it makes with `hw.nodes`, the strategies it rules out, and the tier's links that the
communication's time is planned over (mens.plan.comm)."""
from __future__ import annotations

import os

from omegaconf import DictConfig

from mens.config import schema
from mens.errors import ConfigError


def hw_link(hw):
    """The tier's links (hw.link) for the communication's time (mens.plan.comm); a spec
    from before them has none."""
    from mens.plan.comm import Link
    link = hw.get("link")
    if link is None:
        return Link()
    return Link(link.intra, link.intra_gbs, link.inter, link.inter_gbs, float(link.efficiency))


def resolve_devices(cfg: DictConfig, detection: dict | None, purpose: str,
                    notes: list[str]) -> int:
    """hw.devices (per node) resolved in place; returns the world size (devices × nodes).
    auto = every visible CUDA device when this machine's are in use, else one (a named tier
    planned from elsewhere; CPU and MPS train as one process unless asked)."""
    hw = cfg.hw
    visible = _visible(hw.backend, detection) if detection is not None else None
    if hw.devices == schema.AUTO:
        n = visible if hw.backend == "cuda" and visible else 1
    else:
        n = int(hw.devices)
        if purpose == "train" and visible is not None and n > visible:
            what = "CUDA devices" if hw.backend == "cuda" else "CPU cores (one process each)"
            raise ConfigError(f"hw.devices={n} but this machine has {visible} {what}: use "
                              f"hw.devices<={visible} (or auto).", key="hw.devices")
    if hw.backend == "mps" and n > 1:
        raise ConfigError(f"hw.devices={n}: a Mac trains on its one GPU; use hw.devices=1.",
                          key="hw.devices")
    hw.devices = n
    world = n * hw.nodes
    if hw.strategy == "single" and world > 1:
        raise ConfigError(f"hw.strategy=single with {world} devices (hw.devices × hw.nodes): "
                          f"use hw.strategy=auto, ddp or fsdp2, or hw.devices=1.",
                          key="hw.strategy")
    if hw.strategy == "fsdp2" and cfg.lane.method != "full":
        raise ConfigError(f"hw.strategy=fsdp2 shards the full lane; lane {cfg.lane.name} trains "
                          f"adapters over a replicated base: use hw.strategy=auto (ddp) or "
                          f"lane=full.", key="hw.strategy")
    if world == 1 and hw.strategy in ("ddp", "fsdp2"):
        notes.append(f"hw.strategy={hw.strategy} with one device: trains as a single device")
    return world


def _visible(backend: str, detection: dict) -> int:
    """Devices of the backend on this machine (CPU: cores, one process each)."""
    if backend == "cuda":
        return int(detection.get("count", 1))
    if backend == "cpu":
        return os.cpu_count() or 1
    return 1
