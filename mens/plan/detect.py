"""Detect how much memory a new fine-tuning job can use on this machine, now.

The memory planner sizes the run against `available_gb`, so this module errs
low: where two signals exist it takes the stricter one, every fallback is
written into `notes`, and when nothing can be measured it raises
DetectionError instead of guessing a budget.

torch is imported lazily and only on machines that plausibly have the matching
accelerator, so CPU-only machines (CI, laptops) never pay for the import.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

GiB = 2**30
# Apple's default Metal working-set cap is roughly 75 % of unified memory; used
# only when torch cannot tell us the real recommended_max_memory().
STATIC_ADVISORY_FRACTION = 0.75
# vm_stat's reclaimable figure is optimistic (purgeable pages can overlap the
# inactive queue, and the OS wants headroom), so hold back a margin.
MARGIN_PERCENT = 15
MARGIN_FLOOR_BYTES = 2 * GiB
_LIVE_KEYS = ("Pages free", "Pages inactive", "Pages speculative", "Pages purgeable")
_FIX = "pass +hw=<tier> hw.memory_gb=N to state the machine by hand"


@dataclass(frozen=True)
class Detected:
    backend: str  # "cuda" | "mps" | "cpu"
    device_name: str
    total_gb: float  # nameplate memory, GiB
    available_gb: float  # what a new job can use now, GiB
    bf16: bool
    source: str  # one line: how available_gb was obtained
    notes: tuple[str, ...] = ()  # loud fallbacks
    count: int = 1  # devices of this backend visible here (CUDA: torch.cuda.device_count())


class DetectionError(Exception):
    """Detection failed; the message says what failed and how to proceed."""


def _run(cmd: list[str]) -> str | None:
    """stdout of a short system command, or None if it cannot be run."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _is_apple_silicon() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


def _machine() -> str:
    desc = f"{platform.system()} {platform.machine()}"
    # An x86_64 Python under Rosetta on an M-series Mac cannot reach MPS; say so,
    # because "this machine is Darwin x86_64" would be baffling on an M3.
    translated = sys.platform == "darwin" and (_run(["sysctl", "-n", "sysctl.proc_translated"]) or "").strip()
    if translated == "1":
        desc += " under Rosetta; install an arm64 Python to use the GPU"
    return desc


def _nvidia_plausible() -> bool:
    # Cheap filesystem checks first, so machines without NVIDIA never import torch.
    return (bool(shutil.which("nvidia-smi"))
            or os.path.exists("/proc/driver/nvidia") or os.path.exists("/dev/nvidia0"))


def detect(prefer: str | None = None) -> Detected:
    """Auto: Apple Silicon -> mps, NVIDIA -> cuda, else cpu. `prefer` forces one backend."""
    if prefer is None:
        if _is_apple_silicon():
            return _detect_mps()
        if _nvidia_plausible():
            # A driver with unusable CUDA raises rather than silently planning a
            # CPU run on a GPU box; the message says how to force cpu.
            return _detect_cuda()
        return cpu_available()
    backends = {"mps": _detect_mps, "cuda": _detect_cuda, "cpu": cpu_available}
    if prefer.lower() not in backends:
        raise DetectionError(f"Unknown backend {prefer!r}: expected 'cuda', 'mps', 'cpu', "
                             "or None to auto-detect.")
    return backends[prefer.lower()]()


# ---------------------------------------------------------------- Apple Silicon

_HEADER = re.compile(r"page size of (\d+) bytes")
# Real lines look like `Pages free:                  64712.` or
# `"Translation faults":   13199997030.`; the trailing period is required so a
# number cut off mid-write (truncated pipe) is never read as a smaller count.
_LINE = re.compile(r'^"?([^":]+?)"?:\s+(\d+)\.$')


def parse_vm_stat(text: str) -> dict[str, int]:
    """Page counts keyed by vm_stat's label (quotes stripped) plus "page_size" in bytes.

    Raises ValueError if there is no page-size header or no counts at all.
    """
    counts: dict[str, int] = {}
    for line in text.splitlines():
        line = line.strip()
        if header := _HEADER.search(line):
            counts["page_size"] = int(header.group(1))
        elif m := _LINE.match(line):
            counts[m.group(1).strip()] = int(m.group(2))
    if "page_size" not in counts:
        raise ValueError("no 'page size of N bytes' header")
    if len(counts) == 1:
        raise ValueError("no page counts")
    return counts


def mac_available_bytes(
    vm_stat_text: str | None, metal_limit_bytes: int | None, total_bytes: int
) -> tuple[int, str, tuple[str, ...]]:
    """(available bytes, source line, notes) = min(Metal limit, vm_stat live figure − margin).

    Falls back to the Metal (or static 0.75 × RAM) advisory alone when vm_stat
    is missing or unparseable; it never returns "unlimited".
    """
    notes: list[str] = []
    if metal_limit_bytes is not None and metal_limit_bytes > 0:
        advisory, label = int(metal_limit_bytes), "Metal working-set limit"
    elif total_bytes > 0:
        advisory, label = int(total_bytes * STATIC_ADVISORY_FRACTION), "static Metal advisory 0.75 × RAM"
        notes.append("torch.mps.recommended_max_memory() unavailable; "
                     "used static Metal advisory 0.75 × total RAM")
    else:
        raise DetectionError("Could not read this Mac's Metal working-set limit or its total RAM, "
                             f"so there is no safe memory budget; {_FIX}.")

    if vm_stat_text is None:
        notes.append(f"vm_stat could not be run; used {label} alone")
        return advisory, label, tuple(notes)
    try:
        counts = parse_vm_stat(vm_stat_text)
        missing = [k for k in _LIVE_KEYS if k not in counts]
        if missing:
            raise ValueError("missing " + ", ".join(repr(k) for k in missing))
    except ValueError as e:
        notes.append(f"vm_stat parse failed ({e}); used {label} alone")
        return advisory, label, tuple(notes)

    reclaimable = sum(counts[k] for k in _LIVE_KEYS) * counts["page_size"]
    margin = max(reclaimable * MARGIN_PERCENT // 100, MARGIN_FLOOR_BYTES)
    live = max(0, reclaimable - margin)
    source = f"min({label} {advisory / GiB:.1f} GiB, vm_stat live pressure − margin {live / GiB:.1f} GiB)"
    return min(advisory, live), source, tuple(notes)


def _metal_limit() -> tuple[int | None, str | None]:
    """(torch.mps.recommended_max_memory(), None) or (None, why it is unavailable)."""
    try:
        import torch  # lazy: only Apple Silicon reaches here

        if not torch.backends.mps.is_available():
            return None, "torch is installed but its MPS backend is unavailable; training on mps will fail"
        limit = int(torch.mps.recommended_max_memory())
        return (limit, None) if limit > 0 else (None, None)
    except Exception as e:  # ImportError, old torch without the API, driver errors: all mean "no figure"
        return None, f"torch MPS query failed ({type(e).__name__}: {e})"


def _detect_mps() -> Detected:
    if not _is_apple_silicon():
        raise DetectionError(
            f"m_series (backend 'mps') needs an Apple Silicon GPU (this machine is {_machine()}). "
            f"Use a backend this machine has (+hw=auto or +hw=cpu) or, to plan for another machine, {_FIX}."
        )
    import psutil  # a second source of total RAM in case sysctl fails

    memsize = (_run(["sysctl", "-n", "hw.memsize"]) or "").strip()
    total = int(memsize) if memsize.isdigit() else psutil.virtual_memory().total
    metal, why = _metal_limit()
    available, source, notes = mac_available_bytes(_run(["vm_stat"]), metal, total)
    notes = ((why,) if why else ()) + notes

    # MPS bf16 arrived in macOS 14 (Sonoma).
    version = platform.mac_ver()[0]
    major = version.split(".")[0]
    if not major.isdigit():
        bf16, notes = True, notes + ("could not read macOS version; assumed bf16 support (needs macOS 14+)",)
    elif int(major) >= 14:
        bf16 = True
    else:
        bf16, notes = False, notes + (f"macOS {version} < 14: MPS has no bf16; plan fp16/fp32",)
    name = (_run(["sysctl", "-n", "machdep.cpu.brand_string"]) or "").strip() or "Apple Silicon"
    return Detected("mps", name, total / GiB, available / GiB, bf16, source, notes)


# ----------------------------------------------------------------------- CUDA

def _detect_cuda() -> Detected:
    if not _nvidia_plausible():
        raise DetectionError(
            f"cuda needs an NVIDIA GPU, but no NVIDIA driver was found (no nvidia-smi, /proc/driver/nvidia "
            f"or /dev/nvidia0; this machine is {_machine()}). Install the driver, or {_FIX}."
        )
    try:
        import torch  # lazy: only machines with an NVIDIA driver reach here
    except ImportError as e:
        raise DetectionError(f"An NVIDIA driver is present but torch cannot be imported ({e}); "
                             f"install a CUDA build of torch, or {_FIX}.") from e
    if not torch.cuda.is_available():
        raise DetectionError(
            f"An NVIDIA driver is present but torch.cuda.is_available() is False (torch {torch.__version__}, "
            f"CUDA build {torch.version.cuda}); install a torch build matching the driver, "
            f"plan a CPU run with +hw=cpu (detect(prefer='cpu')), or {_FIX}."
        )
    try:
        free, total = torch.cuda.mem_get_info()
        name = torch.cuda.get_device_name()
        bf16 = bool(torch.cuda.is_bf16_supported())
        count = torch.cuda.device_count()
    except Exception as e:  # driver/runtime errors surface as assorted RuntimeErrors
        raise DetectionError(f"Querying the CUDA device failed ({type(e).__name__}: {e}); "
                             f"check nvidia-smi, or {_FIX}.") from e
    notes = (f"{count} CUDA devices visible; budget is for the current device only",) if count > 1 else ()
    return Detected("cuda", name, total / GiB, free / GiB, bf16, "cuda mem_get_info free", notes,
                    count)


# ------------------------------------------------------------------------ CPU

def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_available() -> Detected:
    """System RAM via psutil; bf16 is False because planners use fp32 on CPU."""
    try:
        import psutil

        vm = psutil.virtual_memory()
    except Exception as e:  # missing psutil or an unsupported platform
        raise DetectionError(f"Could not read system memory via psutil ({type(e).__name__}: {e}); "
                             f"install psutil, or {_FIX}.") from e
    if vm.total <= 0:
        raise DetectionError(f"psutil reported {vm.total} bytes of RAM, which cannot be right; {_FIX}.")
    # psutil reads /proc/meminfo, which inside a memory-limited container shows the
    # host's RAM, not the cgroup limit; such runs should pass hw.memory_gb=N.
    return Detected("cpu", f"cpu: {_cpu_name()}", vm.total / GiB, vm.available / GiB, False,
                    "psutil.virtual_memory().available")
