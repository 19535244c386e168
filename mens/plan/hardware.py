"""Hardware resolution: a tier's budget from its headroom policy, `hw=auto` filled from what
detect() finds on this machine, CUDA names mapped to tiers (each tier's device_names), and
QLoRA support by backend."""
from __future__ import annotations

import importlib.metadata as md
import re
from dataclasses import asdict, is_dataclass
from functools import lru_cache
from pathlib import Path

from omegaconf import DictConfig

from mens.config.options import load_option
from mens.errors import ConfigError
from mens.resources import option_names

# bitsandbytes nf4 support by installed version (first match from the top wins). 0.50 runs
# 4-bit on CPU, CUDA and MPS; before it only CUDA is trusted here.
BNB_NF4 = [((0, 50), {"cuda", "cpu", "mps"}), ((0, 43), {"cuda"})]


def tier_budget(hw, available_gb: float | None) -> tuple[float, float, float]:
    """(usable, headroom, budget) in GiB from the tier's policy and, when live, what's free."""
    pol = hw.headroom
    usable = hw.memory_gb * pol.advisory_frac - pol.reserve_gb
    if available_gb is not None:
        usable = min(usable, available_gb)
    headroom = max(pol.frac * usable, pol.min_gb)
    return usable, headroom, max(usable - headroom, 0.0)


def tiers() -> dict:
    """Every hw tier by name, shipped and the user's own (./conf/hw/*.yaml), as frozen HwSpec:
    a tier says itself how it is recognised (device_*, catalog_*), so a new one is one file."""
    # kept per working directory (where ./conf is) and listing: an estimate asks per offer
    return _tiers(tuple(option_names("hw", user=True)), Path.cwd())


@lru_cache(maxsize=8)
def _tiers(names: tuple[str, ...], cwd: Path) -> dict:
    return {name: load_option("hw", name) for name in names}


def cuda_names() -> list[tuple[str, float, float | None, str]]:
    """torch.cuda.get_device_name() → tier: (pattern, GiB from, GiB below, tier), one row per
    pattern of each tier's device_names. Whole words only (\\b), because the names nest: L4 ⊂
    L40 ⊂ L40S, A10G ~ A100, "RTX A6000" vs "RTX 6000 Ada". The rows must be disjoint (no name
    matches two; cuda_tier refuses one that does), so their order cannot decide a tier."""
    return [(pattern, hw.device_min_gb, hw.device_below_gb, name)
            for name, hw in tiers().items() for pattern in hw.device_names]


def cuda_tier(device_name: str, total_gb: float) -> str | None:
    found = [tier for pattern, lo, hi, tier in cuda_names()
             if re.search(pattern, device_name, re.IGNORECASE)
             and total_gb >= lo and (hi is None or total_gb < hi)]
    if len(found) > 1:   # overlapping tiers: say so rather than let the row order choose
        raise ConfigError(f"CUDA device {device_name!r} matches hw tiers {found}: their "
                          f"device_names (conf/hw/<tier>.yaml) overlap; make them exclude each "
                          f"other.", key="hw")
    return found[0] if found else None


def memory_needed(hw, budget_gb: float) -> float:
    """Invert tier_budget: the smallest whole `hw.memory_gb` whose budget is >= budget_gb."""
    import math

    pol = hw.headroom
    usable = max(budget_gb / (1 - pol.frac), budget_gb + pol.min_gb)
    return float(math.ceil((usable + pol.reserve_gb) / pol.advisory_frac))


def resolve_hw(hw: DictConfig, purpose: str, notes: list[str]) -> tuple[dict | None, float]:
    """Fill hw.backend / memory_gb / bf16 in place; return (detection, budget GiB)."""
    from mens.plan.detect import DetectionError, detect

    need_device = purpose == "train" or hw.memory_gb is None
    det = None
    if need_device:
        prefer = None if hw.backend == "auto" else hw.backend
        try:
            det = detect(prefer)
        except DetectionError as e:
            if hw.backend == "mps":
                import platform
                raise ConfigError(
                    f"+hw=m_series needs an Apple Silicon GPU and this machine "
                    f"({platform.system()} {platform.machine()}) has none. "
                    f"To plan for a Mac from here, give its memory: "
                    f"`python -m mens.plan +hw=m_series hw.memory_gb=128 +rung=0.6b`.",
                    key="hw") from None
            if hw.backend == "auto":
                raise ConfigError(f"hw=auto could not detect this machine: {e}", key="hw") from None
            raise ConfigError(
                f"+hw={hw.name} needs a {hw.backend.upper()} device and this machine lacks one "
                f"({e}). Plan for it from here with `python -m mens.plan +hw={hw.name} ...`, or "
                f"train here with `+hw=auto`.", key="hw") from None
        notes.extend(det.notes)
    if hw.backend == "auto":   # take the policy (and speeds) of the tier this machine is
        tier = {"cpu": "cpu", "mps": "m_series"}.get(det.backend) \
            or cuda_tier(det.device_name, det.total_gb)
        base = load_option("hw", tier or "h100")
        if det.backend == "cuda" and not tier:
            notes.append(f"hw: {det.device_name} matches no named tier; no time estimates")
        for k in ("lightning", "headroom", "tflops_bf16", "bandwidth_gbs", "link"):
            if k == "link" and not tier:   # no tier, no link figures: the default (unknown)
                continue
            v = getattr(base, k) if tier or k in ("lightning", "headroom") else None
            if is_dataclass(v):
                for kk, vv in asdict(v).items():
                    hw[k][kk] = vv
            else:
                hw[k] = v
        hw.backend = det.backend
        hw.description = det.device_name
    if hw.bf16 is None:
        hw.bf16 = bool(det.bf16) if det else False
    overridden = hw.memory_gb is not None
    if not overridden:
        hw.memory_gb = round(det.total_gb, 2)
    live = None if overridden else det.available_gb
    if live is not None and hw.backend == "mps":   # detect() already kept max(15 %, 2 GiB) back
        hw.headroom.frac, hw.headroom.min_gb, hw.headroom.advisory_frac = 0.0, 0.0, 1.0
    usable, headroom, budget = tier_budget(hw, live)
    detection = None if det is None else {**asdict(det), "usable_gb": round(usable, 3),
                                          "headroom_gb": round(headroom, 3),
                                          "memory_overridden": overridden}
    return detection, budget


def qlora_support(backend: str) -> tuple[bool, str]:
    try:
        version = md.version("bitsandbytes")
    except md.PackageNotFoundError:
        return False, "bitsandbytes is not installed"
    v = tuple(int(x) for x in version.split(".")[:2] if x.isdigit())
    for since, backends in BNB_NF4:
        if v >= since:
            return backend in backends, f"bitsandbytes {version} (nf4 on {', '.join(sorted(backends))})"
    return False, f"bitsandbytes {version} predates nf4 support mens trusts (0.43)"
