"""The offers catalogue: the shipped rows, strict reading (file:line), refresh from SkyPilot CSVs."""
from __future__ import annotations

import csv
import re

import pytest

from mens.cloud.catalog import COLUMNS, SHIPPED, load, refresh, tier_of
from mens.errors import DataError

HEADER = ",".join(COLUMNS)


def test_the_shipped_catalogue_covers_four_providers_with_dated_sourced_rows():
    offers = load(SHIPPED)
    providers = {o.provider for o in offers}
    assert {"runpod", "vast", "gcp", "lambda"} <= providers
    for p in ("runpod", "gcp", "lambda", "vast"):   # 1/2/4/8-GPU offers where they exist
        assert {1, 2, 4, 8} <= {o.count for o in offers if o.provider == p}, p
    for o in offers:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", o.date) and "skypilot-catalog" in o.source
        assert o.spot_price_hour is None or o.spot_price_hour > 0
    assert sum(o.tier is not None for o in offers) >= 60


def test_plain_h100_and_a100_offers_plan_on_the_board_they_are():
    """SkyPilot's plain "H100" / "A100-80GB" cover PCIe and SXM boards; the H100 PCIe has
    ~0.76x the SXM's TFLOPS, so an offer is planned on the tier of the board it lists, or that
    its provider's plain name means (RunPod: PCIe), never the SXM tier by default."""
    from mens.cloud.catalog import board
    from mens.config.options import load_option

    shipped = {o.id: o for o in load(SHIPPED)}
    assert shipped["runpod:A100-80GB:1"].tier == "a100_pcie"        # RunPod's plain = PCIe
    assert shipped["runpod:A100-80GB-SXM:1"].tier == "a100_80g"
    assert shipped["lambda:H100:1"].tier == "h100" and "SXM" in shipped["lambda:H100:1"].board
    assert shipped["gcp:H100:1"].tier == shipped["vast:H100:1"].tier == "h100"
    assert board("runpod", "H100", 80, "1x_H100_SECURE")[0] == "h100_pcie"
    assert board("lambda", "H100", 80, "gpu_1x_h100_pcie")[0] == "h100_pcie"
    assert board("vast", "H100", 80, "1x-H100_NVL-32-65536")[0] == "h100_nvl"
    assert board("vast", "H100", 94, "")[0] == "h100_nvl"           # the NVL's 94 GB
    assert board("lambda", "A100", 80, "gpu_8x_a100_80gb_sxm4")[0] == "a100_80g"
    assert board("lambda", "A100", 40, "gpu_1x_a100")[0] == "a100_40g"
    tier, why = board("vast", "H100", 80, "1x-H100-32-65536")        # says no board
    assert tier == "h100_pcie" and "slower PCIe" in why
    ratio = load_option("hw", "h100").tflops_bf16 / load_option("hw", "h100_pcie").tflops_bf16
    assert 1.25 < ratio < 1.35                                       # what the mapping is worth


def test_a_gcp_offer_is_the_sum_of_its_host_and_accelerator_rows():
    # the source column quotes both rows' prices as SkyPilot's gcp/vms.csv lists them
    for o in (o for o in load(SHIPPED) if o.provider == "gcp"):
        hp, hs, ap, asp = map(float, re.search(
            r"host \S+ ([\d.]+)/([\d.]+) \+ \S+ ([\d.]+)/([\d.]+)", o.source).groups())
        assert o.price_hour == pytest.approx(hp + ap, abs=1e-5)
        assert o.spot_price_hour == pytest.approx(hs + asp, abs=1e-5)


@pytest.mark.parametrize("row, what", [
    ("runpod,H100-SXM,1,80,20,80,two,2.69,US,2026-11-30,x", "price_hour"),
    ("runpod,H100-SXM,1,80,20,80,2.99,2.69,US,30/11/2026,x", "date"),
    ("azurex,H100,1,80,20,80,2.99,,US,2026-11-30,x", "provider"),
    ("runpod,H100-SXM,1,80,20,80,2.99,2.69,US,2026-11-30", "fields"),
])
def test_a_malformed_row_is_named_by_file_and_line(tmp_path, row, what):
    f = tmp_path / "offers.csv"
    f.write_text(f"# a comment line\n{HEADER}\nvast,RTX4090,1,24,32,64,0.4,,Texas,2026-11-30,x\n{row}\n")
    with pytest.raises(DataError) as e:
        load(f)
    assert f"{f}:4" in e.value.message and what in e.value.message


def test_estimate_with_a_malformed_catalogue_exits_2_with_file_line(cloud_cli, tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text(f"{HEADER}\nlambda,H100,1,80,26,225,4.29,,us-east-1,2026-11-30,x\n"
                 f"lambda,H100,2,80,52,450,,,us-east-1,2026-11-30,x\n")
    p = cloud_cli("mens.cloud", "estimate", f"cloud.catalog={f}", f"hydra.run.dir={tmp_path}/r")
    assert p.returncode == 2, p.stderr
    assert f"{f}:3" in p.stderr and "price_hour" in p.stderr
    assert p.stderr.count("\n") == 1   # one paragraph


def test_an_unknown_provider_or_offer_exits_2(cloud_cli, tmp_path):
    p = cloud_cli("mens.cloud", "estimate", "cloud.providers=[runpod,azure]",
                  f"hydra.run.dir={tmp_path}/a")
    assert p.returncode == 2 and "cloud.providers" in p.stderr and "azure" in p.stderr
    p = cloud_cli("mens.cloud", "launch", "cloud.offer=runpod:B300:8", f"hydra.run.dir={tmp_path}/b")
    assert p.returncode == 2 and "cloud.offer=runpod:B300:8" in p.stderr
    f = tmp_path / "a40.csv"   # every shipped GPU has a tier; the A40 (a SkyPilot name) has none
    f.write_text(f"{HEADER}\nvast,A40,1,48,16,64,0.35,,Texas,2026-11-30,x\n")
    p = cloud_cli("mens.cloud", "launch", f"cloud.catalog={f}", "cloud.offer=vast:A40:1",
                  f"hydra.run.dir={tmp_path}/c")
    assert p.returncode == 2 and "no mens hw tier" in p.stderr
    p = cloud_cli("mens.cloud", "frobnicate")
    assert p.returncode == 2 and "estimate" in p.stderr


# Real rows of SkyPilot's catalogs (skypilot-org/skypilot-catalog, catalogs/v8 runpod and gcp,
# catalogs/v7 vast), in their own column layouts; the RunPod A40 row is made up in that layout
# (a GPU SkyPilot names and no mens tier describes: the skipped path).
RUNPOD = '''InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Region,SpotPrice,Price,AvailabilityZone,GpuInfo
1x_A100-80GB_SECURE,A100-80GB,1.0,8.0,117.0,IN,1.39,1.39,AP-IN-1,"{'Gpus': [{'Name': 'A100 PCIe', 'Manufacturer': 'Nvidia', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 80}}], 'TotalGpuMemoryInMiB': 80}"
1x_A100-80GB_SECURE,A100-80GB,1.0,8.0,117.0,US,1.29,1.29,US-CA-1,"{'Gpus': [{'Name': 'A100 PCIe', 'Manufacturer': 'Nvidia', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 80}}], 'TotalGpuMemoryInMiB': 80}"
2x_A100-80GB_SECURE,A100-80GB,2.0,16.0,234.0,IN,2.78,2.78,AP-IN-1,"{'Gpus': [{'Name': 'A100 PCIe', 'Manufacturer': 'Nvidia', 'Count': 2, 'MemoryInfo': {'SizeInMiB': 80}}], 'TotalGpuMemoryInMiB': 160}"
1x_RTX6000-Ada_SECURE,RTX6000-Ada,1.0,14.0,48.0,US,,0.77,US-CA-1,"{'Gpus': [{'Name': 'RTX 6000 Ada', 'Count': 1}], 'TotalGpuMemoryInMiB': 48}"
1x_A40_SECURE,A40,1.0,9.0,50.0,US,,0.40,US-KS-1,"{'Gpus': [{'Name': 'A40', 'Count': 1}], 'TotalGpuMemoryInMiB': 48}"
'''
GCP = '''InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice
a2-ultragpu-1g,12.0,170.0,,,,us-central1,us-central1-a,1.09962,0.54978
a2-ultragpu-1g,12.0,170.0,,,,europe-west4,europe-west4-a,1.2105,0.47328
a3-highgpu-1g,26.0,234.0,,,,us-central1,us-central1-a,1.18251,0.36117
n4-standard-2,2.0,8.0,,,,us-central1,us-central1-a,0.0907,0.03358
,,,A100-80GB,1,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 81920}}]},us-central1,us-central1-a,1.8462,1.964
,,,A100-80GB,1,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 81920}}]},europe-west4,europe-west4-a,2.03285,2.1626
,,,H100,1,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 81920}}]},us-central1,us-central1-a,4.20076,2.9926
,,,B200,8,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 184320}}]},us-central1,us-central1-b,90.216,32.6064
'''
VAST = '''InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region
1x-H100_SXM-32-65536,H100,1,32,64.0,"{'Gpus': [{'Name': 'H100', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 81559}}], 'TotalGpuMemoryInMiB': 81559}",1.80,0.00,"Czechia, CZ, EU"
1x-RTX_5090-32-65536,RTX5090,1,32,64.0,"{'Gpus': [{'Name': 'RTX5090', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 32607}}], 'TotalGpuMemoryInMiB': 32607}",0.53,0.00,"Taiwan, TW, AS"
'''


def test_refresh_rebuilds_from_skypilot_catalog_csvs(tmp_path):
    sky = tmp_path / "catalogs" / "v8"
    for cloud, text in (("runpod", RUNPOD), ("gcp", GCP), ("vast", VAST)):
        (sky / cloud).mkdir(parents=True)
        (sky / cloud / "vms.csv").write_text(text)
    out = tmp_path / "offers.csv"
    r = refresh(sky, out, today="2026-11-30")
    offers = {o.id: o for o in load(out)}   # what it writes reads back strictly
    assert set(offers) == {"runpod:A100-80GB:1", "runpod:A100-80GB:2", "gcp:A100-80GB:1",
                           "gcp:H100:1", "vast:H100:1", "runpod:RTX6000-Ada:1", "vast:RTX5090:1"}
    assert offers["runpod:A100-80GB:1"].price_hour == 1.29          # the cheapest region
    g = offers["gcp:A100-80GB:1"]                                    # host + accelerator rows
    assert g.price_hour == pytest.approx(1.09962 + 1.8462) and g.region == "us-central1"
    assert g.spot_price_hour == pytest.approx(0.54978 + 1.964) and (g.vcpus, g.ram_gb) == (12, 170)
    assert offers["gcp:H100:1"].price_hour == pytest.approx(1.18251 + 4.20076)
    assert offers["vast:H100:1"].spot_price_hour is None   # vast lists 0.00: no spot price
    assert r["skipped_no_tier"] == {"A40": 1}
    assert (offers["runpod:RTX6000-Ada:1"].tier, offers["vast:RTX5090:1"].gpu_memory_gb) == \
        ("rtx6000ada", 32)
    assert all(o.date == "2026-11-30" and "vms.csv line" in o.source for o in offers.values())
    # a plain A100-80GB / H100 on the board its row lists or its provider names (RunPod's plain
    # names are PCIe; the GpuInfo "A100 PCIe" rides along in `source`); the rest by name
    assert offers["runpod:A100-80GB:1"].tier == "a100_pcie" and "A100 PCIe" in \
        offers["runpod:A100-80GB:1"].source
    assert (offers["gcp:A100-80GB:1"].tier, offers["gcp:H100:1"].tier) == ("a100_80g", "h100")
    assert offers["vast:H100:1"].tier == "h100"                      # 1x-H100_SXM-…
    assert all(o.tier == tier_of()[o.gpu] for o in offers.values()
               if o.gpu not in ("A100-80GB", "H100"))
    with open(out) as f:
        assert next(r for r in csv.reader(f) if not r[0].startswith("#")) == list(COLUMNS)


def test_refresh_without_skypilot_catalogs_exits_2(cloud_cli, tmp_path):
    p = cloud_cli("mens.cloud", "catalog", "refresh", f"cloud.sky_catalogs={tmp_path}/none",
                  f"hydra.run.dir={tmp_path}/r")
    assert p.returncode == 2 and "cloud.sky_catalogs" in p.stderr
