"""The hw tier catalogue: every tier composes, every CUDA tier carries its datasheet speeds, every
CUDA device name torch reports maps to its own tier (not a near namesake), and a plan runs on each."""
from __future__ import annotations

import re

import pytest
import yaml

from mens.cloud.catalog import tier_of
from mens.config.options import load_option
from mens.plan.hardware import cuda_names, cuda_tier
from mens.resources import CONF_DIR

TIERS = sorted(p.stem for p in (CONF_DIR / "hw").glob("*.yaml"))
CUDA = [t for t in TIERS if yaml.safe_load((CONF_DIR / "hw" / f"{t}.yaml").read_text())["backend"]
        == "cuda"]
NEW = ["a10g", "l4", "l40", "a100_pcie", "h100_pcie", "h100_nvl", "rtx5090", "rtx6000ada", "b200"]

# torch.cuda.get_device_name() as the cards report it, with what torch.cuda's total memory reads
# in GiB, and the tier each must map to. The traps: L4 / L40 / L40S, A10G / A100, RTX A6000 /
# RTX 6000 Ada, H100 PCIe / NVL / SXM, A100 40GB / 80GB and PCIe / SXM.
DEVICES = [
    ("NVIDIA A10G", 22.1, "a10g"), ("NVIDIA A10", 22.1, None),
    ("NVIDIA L4", 22.0, "l4"), ("NVIDIA L40", 44.4, "l40"), ("NVIDIA L40S", 44.4, "l40s"),
    ("NVIDIA A100-PCIE-40GB", 39.4, "a100_40g"), ("NVIDIA A100-SXM4-40GB", 39.4, "a100_40g"),
    ("NVIDIA A100 80GB PCIe", 79.1, "a100_pcie"), ("NVIDIA A100-SXM4-80GB", 79.2, "a100_80g"),
    ("NVIDIA H100 PCIe", 79.1, "h100_pcie"), ("NVIDIA H100 NVL", 93.1, "h100_nvl"),
    ("NVIDIA H100 80GB HBM3", 79.1, "h100"), ("NVIDIA H200", 139.8, "h200"),
    ("NVIDIA H200 NVL", 139.8, None), ("NVIDIA GH200 480GB", 94.5, None),
    ("NVIDIA B200", 178.4, "b200"),
    ("NVIDIA GeForce RTX 3090", 23.6, "rtx3090"), ("NVIDIA GeForce RTX 4080 SUPER", 15.7, "rtx4080s"),
    ("NVIDIA GeForce RTX 4090", 23.6, "rtx4090"), ("NVIDIA GeForce RTX 5090", 31.4, "rtx5090"),
    ("NVIDIA RTX A6000", 47.5, "a6000"), ("NVIDIA RTX 6000 Ada Generation", 47.5, "rtx6000ada"),
    ("Tesla T4", 14.6, None),
]


def test_the_catalogue_has_the_rented_cards():
    assert set(NEW) <= set(CUDA)
    assert len(CUDA) == 18 and len(TIERS) == 21   # 9 CUDA tiers before, plus auto, cpu, m_series


def check_tier(hw, tier):
    assert hw.name == tier
    if tier in CUDA:   # speeds for time estimates, the card's own memory, and where they come from
        assert hw.tflops_bf16 > 0 and hw.bandwidth_gbs > 0 and hw.memory_gb > 0 and hw.bf16
        text = (CONF_DIR / "hw" / f"{tier}.yaml").read_text()
        assert re.search(r"https?://", text), f"hw/{tier}.yaml cites no source"
    else:              # auto fills them from the detected tier; cpu and a Mac leave them unknown
        assert hw.tflops_bf16 is None and hw.bandwidth_gbs is None


@pytest.mark.parametrize("tier", sorted(set(TIERS) - set(NEW)))   # NEW: composed by the plan below
def test_every_tier_composes_with_its_speeds(compose, tier):
    check_tier(compose([f"+hw={tier}"]).hw, tier)


def test_dense_not_sparse_and_the_new_cards_figures():
    got = {t: (h.memory_gb, h.tflops_bf16, h.bandwidth_gbs)
           for t, h in ((t, load_option("hw", t)) for t in NEW)}
    assert got == {"a10g": (24, 70, 600), "l4": (24, 121, 300), "l40": (48, 181.05, 864),
                   "a100_pcie": (80, 312, 1935), "h100_pcie": (80, 756, 2000),
                   "h100_nvl": (94, 835.5, 3900), "rtx5090": (32, 209.5, 1792),
                   "rtx6000ada": (48, 364.2, 960), "b200": (180, 2250, 8000)}


@pytest.mark.parametrize("name, gb, tier", DEVICES)
def test_each_device_name_maps_to_its_own_tier(name, gb, tier):
    assert cuda_tier(name, gb) == tier


def test_no_device_name_matches_two_rows_so_order_cannot_decide():
    # each name matches one row or none, so no reordering of the rows can change an answer
    for name, gb, tier in DEVICES:
        rows = [t for p, lo, hi, t in cuda_names() if re.search(p, name, re.IGNORECASE)
                and gb >= lo and (hi is None or gb < hi)]
        assert rows == ([tier] if tier else []), name
    assert {t for *_, t in cuda_names()} == set(CUDA)   # every CUDA tier is detectable


def test_cloud_names_map_to_tiers_that_exist():
    assert set(tier_of().values()) <= set(CUDA)
    for name, tier in [("A10G", "a10g"), ("L4", "l4"), ("L40", "l40"), ("L40S", "l40s"),
                       ("H100-NVL", "h100_nvl"), ("RTX5090", "rtx5090"),
                       ("RTX6000-Ada", "rtx6000ada"), ("B200", "b200")]:
        assert tier_of()[name] == tier


@pytest.mark.parametrize("tier", NEW)
def test_each_new_tier_composes_and_plans_0_6b(compile_run, tier):
    spec, p = compile_run(f"+hw={tier}", "+rung=0.6b")
    check_tier(spec.hw, tier)
    assert p.verdict == "fits" and p.peak_bytes <= p.budget_bytes   # 0.6b LoRA fits even 24 GB
