"""The `hw` group's schema (conf/hw/*.yaml: a GPU tier, a Mac, the CPU) and its valid values:
what the planner budgets against (memory, headroom), times with (TFLOPS, bandwidth, links) and
spreads a run over (devices × nodes, strategy)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from mens.config.ranges import AUTO, Range, count, nonneg, pos


@dataclass
class LightningDefaults:
    accelerator: str = "cpu"      # Lightning Trainer(accelerator=...)
    precision: str = "32-true"    # Trainer(precision=...) when lane.precision is auto


@dataclass
class HeadroomPolicy:
    # usable = memory_gb * advisory_frac - reserve_gb   (what the runtime can ever hand out)
    # budget = usable - max(frac * usable, min_gb)       (what the planner lets a run use)
    advisory_frac: float = 1.0    # Metal's working-set limit is ~3/4 of a Mac's RAM
    reserve_gb: float = 0.0       # CUDA context + driver, OS share
    frac: float = 0.10
    min_gb: float = 0.5


@dataclass
class LinkConfig:
    # How a tier's devices talk, for the gradient traffic in the step time (mens.plan.comm):
    # figures from datasheets, cited in each conf/hw file; a cluster's own can be given.
    intra: str = ""                      # within a node, e.g. "NVLink 4 (NVSwitch)", "PCIe Gen4 x16"
    intra_gbs: Optional[float] = None    # GB/s per device per direction; null: unknown (no comm time)
    inter: str = ""                      # between nodes, e.g. "8 × InfiniBand NDR 400 Gb/s"
    inter_gbs: Optional[float] = None    # GB/s per node per direction, all its NICs; null: unknown
    # ASSUMED share of those figures a ring collective achieves (NCCL's bus bandwidth): 0.8,
    # the sources in mens/plan/comm.py; 1.0 when intra_gbs / inter_gbs are measured busbw
    efficiency: float = 0.8


@dataclass
class HwConfig:
    name: str = MISSING
    backend: str = MISSING        # auto | cuda | mps | cpu
    description: str = ""
    memory_gb: Optional[float] = None   # total memory in GiB as labelled; null = detect here
    bf16: Optional[bool] = None         # null = detect
    tflops_bf16: Optional[float] = None  # dense, for time estimates; null = unknown
    bandwidth_gbs: Optional[float] = None  # memory bandwidth GB/s (datasheet); null = unknown
    lightning: LightningDefaults = field(default_factory=LightningDefaults)
    headroom: HeadroomPolicy = field(default_factory=HeadroomPolicy)
    link: LinkConfig = field(default_factory=LinkConfig)   # device-to-device links (comm time)
    # How a tier is recognised (a new tier is its one option file): mens.plan.hardware.cuda_tier
    # reads device_*, mens.cloud.catalog reads catalog_*; no device or name may match two tiers.
    device_names: List[str] = field(default_factory=list)   # regexes on torch's device name
    device_min_gb: float = 0.0               # ...matched when its memory (GiB) is at least this
    device_below_gb: Optional[float] = None  # ...and below this (null: no bound)
    catalog_names: List[str] = field(default_factory=list)   # SkyPilot accelerator names of it
    catalog_boards: Dict[str, str] = field(default_factory=dict)   # shared name → sxm|pcie|nvl
    # Several devices (mens.plan.planner plans per device; mens.train.strategy runs it):
    devices: Any = AUTO    # per node: auto = every visible accelerator of the backend (CPU: 1 process)
    nodes: int = 1         # SLURM / torchrun nodes; world size = devices × nodes
    strategy: str = AUTO   # auto (the planner chooses and says why) | single | ddp | fsdp2


# Every number of these sections and its valid values (mens.config.validate): null is accepted
# wherever the field is Optional (its meaning is in the note); `[]`: every list item.
RANGES = {
    "hw.memory_gb": pos("the device's memory in GiB; null detects it", "24"),
    "hw.tflops_bf16": pos("dense bf16 TFLOPS for time estimates; null: unknown", "989"),
    "hw.bandwidth_gbs": pos("memory bandwidth in GB/s (datasheet); null: unknown", "3350"),
    "hw.link.intra_gbs": pos("GB/s per device per direction within a node (NVLink, PCIe); "
                             "null: unknown", "450"),
    "hw.link.inter_gbs": pos("GB/s per node per direction between nodes, all its NICs; null: "
                             "unknown", "400"),
    "hw.link.efficiency": Range(lo=0, hi=1, lo_open=True, example="0.8",
                                note="the share of the link figures a collective achieves "
                                     "(1.0 when they are measured bus bandwidths)"),
    "hw.nodes": count("nodes of the run (world size = hw.devices × hw.nodes)", "1"),
    "hw.device_min_gb": nonneg("GiB a device named like this tier has at least", "60"),
    "hw.device_below_gb": pos("GiB a device named like this tier has less than; null: no "
                              "bound", "60"),
    "hw.headroom.advisory_frac": Range(lo=0, hi=1, lo_open=True, example="0.75",
                                       note="the fraction of memory the runtime hands out"),
    "hw.headroom.reserve_gb": nonneg("GiB kept back for the driver and OS", "1.5"),
    "hw.headroom.frac": Range(lo=0, hi=1, hi_open=True, example="0.1",
                              note="the fraction of usable memory the planner keeps free"),
    "hw.headroom.min_gb": nonneg("GiB the planner keeps free at least", "0.5"),
}
# The strings with a fixed set of values
CHOICES = {
    "hw.backend": ["auto", "cuda", "mps", "cpu"],
    "hw.strategy": ["auto", "single", "ddp", "fsdp2"],
    "hw.lightning.precision": ["32-true", "bf16-mixed", "bf16-true", "16-mixed"],
}
