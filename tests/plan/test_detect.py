"""Tests for mens.detect. Mac paths are exercised through the pure functions with
real captured vm_stat output (tests/fixtures/vm_stat/README.txt); CPU paths run
for real on this machine."""
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from mens.plan.detect import (
    GiB,
    DetectionError,
    cpu_available,
    detect,
    mac_available_bytes,
    parse_vm_stat,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures" / "vm_stat"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# ------------------------------------------------------------------ parse_vm_stat

def test_parse_apple_silicon_fixture_exactly():
    c = parse_vm_stat(fixture("apple_silicon_16k.txt"))
    assert c["page_size"] == 16384
    assert c["Pages free"] == 64712
    assert c["Pages active"] == 996993
    assert c["Pages inactive"] == 994622
    assert c["Pages speculative"] == 1744
    assert c["Pages throttled"] == 0
    assert c["Pages wired down"] == 353323
    assert c["Pages purgeable"] == 22116
    assert c["Translation faults"] == 13199997030  # quoted label, quotes stripped
    assert c["File-backed pages"] == 468696
    assert c["Pages stored in compressor"] == 2068175
    assert c["Pages occupied by compressor"] == 678569
    assert c["Swapouts"] == 4209984
    assert len(c) == 23  # 22 counters + page_size


def test_parse_intel_fixture_reads_page_size_from_header():
    c = parse_vm_stat(fixture("intel_4k.txt"))
    assert c["page_size"] == 4096
    assert c["Pages free"] == 83542
    assert c["Pages inactive"] == 240731
    assert c["Pages speculative"] == 7053
    assert c["Pages purgeable"] == 31460
    assert c["Anonymous pages"] == 515660


def test_parse_truncated_keeps_complete_lines_only():
    c = parse_vm_stat(fixture("truncated.txt"))
    assert c == {"page_size": 16384, "Pages free": 64712, "Pages active": 996993}


@pytest.mark.parametrize("text", ["", "zsh: command not found: vm_stat\n",
                                  "Pages free:      100.\nPages inactive:   5.\n"])
def test_parse_rejects_text_without_header(text):
    with pytest.raises(ValueError):
        parse_vm_stat(text)


# ------------------------------------------------------------ mac_available_bytes

# apple_silicon_16k.txt: free + inactive + speculative + purgeable
#   = 64712 + 994622 + 1744 + 22116 = 1_083_194 pages × 16384 = 17_747_050_496 B (~16.5 GiB)
# margin = max(15 %, 2 GiB) = 17_747_050_496 * 15 // 100 = 2_662_057_574 (> 2 GiB)
# live   = 17_747_050_496 − 2_662_057_574 = 15_084_992_922 B (~14.0 GiB)
APPLE_LIVE = 15_084_992_922
TOTAL_48G = 48 * GiB


def test_min_picks_live_pressure_when_metal_limit_is_looser():
    metal = 36 * GiB  # what recommended_max_memory() gives on a 48 GiB Mac
    avail, source, notes = mac_available_bytes(fixture("apple_silicon_16k.txt"), metal, TOTAL_48G)
    assert avail == APPLE_LIVE
    assert source.startswith("min(Metal working-set limit")
    assert "vm_stat live pressure − margin" in source
    assert notes == ()


def test_min_picks_metal_limit_when_it_is_stricter():
    metal = 8 * GiB
    avail, _, notes = mac_available_bytes(fixture("apple_silicon_16k.txt"), metal, TOTAL_48G)
    assert avail == metal
    assert notes == ()


def test_margin_floor_of_2_gib_applies_when_15_percent_is_smaller():
    # 1_000_000 free pages × 4096 = 4_096_000_000 B; 15 % = 614_400_000 < 2 GiB,
    # so margin = 2_147_483_648 and live = 1_948_516_352.
    text = ("Mach Virtual Memory Statistics: (page size of 4096 bytes)\n"
            "Pages free:                             1000000.\n"
            "Pages inactive:                               0.\n"
            "Pages speculative:                            0.\n"
            "Pages purgeable:                              0.\n")
    avail, _, _ = mac_available_bytes(text, 16 * GiB, 16 * GiB)
    assert avail == 1_948_516_352


def test_machine_under_pressure_gets_zero_not_negative():
    # intel_4k.txt: (83542 + 240731 + 7053 + 31460) × 4096 = 1_485_971_456 B < 2 GiB margin
    avail, _, _ = mac_available_bytes(fixture("intel_4k.txt"), 6 * GiB, 8 * GiB)
    assert avail == 0


def test_truncated_vm_stat_falls_back_to_metal_limit_with_note():
    metal = 36 * GiB
    avail, source, notes = mac_available_bytes(fixture("truncated.txt"), metal, TOTAL_48G)
    assert avail == metal  # the advisory, never "unlimited" and never total RAM
    assert source == "Metal working-set limit"
    assert len(notes) == 1 and "vm_stat parse failed" in notes[0] and "Pages inactive" in notes[0]


@pytest.mark.parametrize("text", [None, "", "garbage\x00\xff not vm_stat"])
def test_unrunnable_or_garbled_vm_stat_falls_back_with_note(text):
    avail, _, notes = mac_available_bytes(text, 20 * GiB, TOTAL_48G)
    assert avail == 20 * GiB
    assert any("vm_stat" in n for n in notes)


def test_no_metal_limit_uses_static_advisory_and_still_takes_min():
    # static advisory = 0.75 × 48 GiB = 36 GiB, looser than live → live wins
    avail, source, notes = mac_available_bytes(fixture("apple_silicon_16k.txt"), None, TOTAL_48G)
    assert avail == APPLE_LIVE
    assert "static Metal advisory" in source
    assert any("0.75" in n for n in notes)


def test_no_metal_limit_and_garbled_vm_stat_gives_static_advisory_only():
    avail, _, notes = mac_available_bytes("garbled", None, 16 * GiB)
    assert avail == 12 * GiB  # 0.75 × 16 GiB
    assert len(notes) == 2  # one for the missing Metal limit, one for vm_stat


def test_no_signal_at_all_raises_instead_of_guessing():
    with pytest.raises(DetectionError, match="hw.memory_gb"):
        mac_available_bytes(None, None, 0)


# ------------------------------------------------------------- this (CPU) machine

def test_cpu_available_matches_psutil():
    d = cpu_available()
    vm = psutil.virtual_memory()
    assert d.backend == "cpu" and d.bf16 is False
    assert d.device_name.startswith("cpu: ")
    assert d.total_gb == vm.total / GiB
    assert 0 < d.available_gb <= d.total_gb
    assert d.source == "psutil.virtual_memory().available" and d.notes == ()
    assert abs(d.available_gb - vm.available / GiB) < 0.5  # psutil's figure, modulo drift between calls


def cpu_only_linux() -> bool:
    nvidia = shutil.which("nvidia-smi") or Path("/proc/driver/nvidia").exists() or Path("/dev/nvidia0").exists()
    return sys.platform.startswith("linux") and not nvidia


def test_detect_auto_is_cpu_here():
    if not cpu_only_linux():
        pytest.skip("this test describes a CPU-only Linux machine")
    d = detect()
    assert d.backend == "cpu"
    assert d.available_gb > 0


def test_detect_mps_on_linux_raises_mentioning_apple():
    if not sys.platform.startswith("linux"):
        pytest.skip("describes a Linux machine")
    with pytest.raises(DetectionError) as e:
        detect(prefer="mps")
    msg = str(e.value)
    assert "Apple Silicon" in msg and "Linux" in msg and "hw.memory_gb" in msg


def test_detect_cuda_without_nvidia_raises():
    if not cpu_only_linux():
        pytest.skip("describes a machine without NVIDIA")
    with pytest.raises(DetectionError, match="NVIDIA"):
        detect(prefer="cuda")


def test_unknown_backend_raises():
    with pytest.raises(DetectionError, match="expected 'cuda', 'mps', 'cpu'"):
        detect(prefer="tpu")


def test_cpu_detection_never_imports_torch():
    if not cpu_only_linux():
        pytest.skip("this test describes a CPU-only Linux machine")
    # Fresh interpreter: other tests (or conftest) may already have imported torch.
    code = ("import sys, mens.plan.detect as d; r = d.detect(); "
            "assert r.backend == 'cpu', r; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
