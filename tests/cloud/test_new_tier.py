"""A new GPU tier is one option file: a conf/hw/<tier>.yaml in the user's ./conf (mens.resources
USER_CONF) is composed, detected from torch's device name, kept by a catalogue refresh under its
SkyPilot name, and planned and priced by `mens cloud estimate` — with no change to the code."""
from __future__ import annotations

import pytest

from mens.cloud.catalog import load, refresh, tier_of
from mens.cloud.estimate import estimate
from mens.errors import ConfigError
from mens.plan.hardware import cuda_tier

# made-up figures for a card no shipped tier describes; only the fields a tier needs
TIER = r"""# a tier of the user's own (test): NVIDIA RTX PRO 6000 Blackwell, 96 GB GDDR7
name: rtxpro6000
backend: cuda
description: NVIDIA RTX PRO 6000 Blackwell, 96 GB GDDR7
memory_gb: 96
bf16: true
tflops_bf16: 500
bandwidth_gbs: 1792
lightning: {accelerator: cuda, precision: bf16-mixed}
headroom: {reserve_gb: 0.75, frac: 0.05, min_gb: 0.5}
link: {intra: "PCIe Gen5 x16", intra_gbs: 63, inter: "100 Gb/s Ethernet", inter_gbs: 12.5}
device_names: ['\bRTX PRO 6000\b']
catalog_names: [RTXPRO6000]
"""
# SkyPilot's RunPod vms.csv layout (tests/cloud/test_catalog.py), one row of the new card
RUNPOD = """InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Region,SpotPrice,Price,AvailabilityZone,GpuInfo
1x_RTXPRO6000_SECURE,RTXPRO6000,1.0,16.0,128.0,US,,1.79,US-CA-1,
"""


@pytest.fixture
def user_tier(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # mens searches ./conf of the working directory
    (tmp_path / "conf" / "hw").mkdir(parents=True)
    (tmp_path / "conf" / "hw" / "rtxpro6000.yaml").write_text(TIER)
    return tmp_path


def test_a_new_tier_is_one_option_file(user_tier, compose):
    assert compose(["+hw=rtxpro6000"]).hw.memory_gb == 96                  # composed
    assert cuda_tier("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 94.6) == "rtxpro6000"
    assert cuda_tier("NVIDIA RTX 6000 Ada Generation", 47.5) == "rtx6000ada"   # its neighbour
    assert tier_of()["RTXPRO6000"] == "rtxpro6000"                          # catalogued by name
    (user_tier / "sky" / "runpod").mkdir(parents=True)
    (user_tier / "sky" / "runpod" / "vms.csv").write_text(RUNPOD)
    r = refresh(user_tier / "sky", user_tier / "offers.csv", today="2026-12-01")
    assert (r["offers"], r["skipped_no_tier"]) == (1, {})
    offer, = load(user_tier / "offers.csv")
    assert (offer.id, offer.tier, offer.gpu_memory_gb) == ("runpod:RTXPRO6000:1", "rtxpro6000", 96)
    est = estimate(compose(["+rung=0.6b", f"cloud.catalog={user_tier / 'offers.csv'}",
                            "cloud.max_age_days=100000"]))
    row, = est["offers"]                                                    # planned and priced
    assert (row["tier"], row["fits"]) == ("rtxpro6000", True)
    assert row["est_cost_usd"] == pytest.approx(row["est_hours"] * 1.79, rel=1e-3)


def test_two_tiers_claiming_one_name_is_a_config_error(user_tier):
    (user_tier / "conf" / "hw" / "rtxpro6000.yaml").write_text(
        TIER.replace("[RTXPRO6000]", "[RTX4090]"))
    with pytest.raises(ConfigError) as e:
        tier_of()
    assert "RTX4090" in e.value.message and "rtx4090" in e.value.message
