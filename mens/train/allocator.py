"""The C heap behaviour mens trains under on CPU (glibc), set inside its own process so every user
gets the behaviour the memory contract's CPU cells were fitted on.

glibc's malloc adapts its mmap threshold upward as large blocks are freed (up to 32 MiB on 64-bit):
after the first step most tensors come from the heap, and freed heap memory stays with the process
("retention": 3.7 GiB of a 9.1 GiB window at the 0.6b shape). The same shape then peaks 15 % apart
from run to run (calibration/repro/README.md). A fixed threshold (mallopt M_MMAP_THRESHOLD, which
also turns the adaptation off) maps every block of at least that size on its own and returns it
to the system when freed. Measured here (0.6b architecture, seq 2048, micro 1, LoRA, checkpointing,
per-record attention + chunked loss; the training window): glibc's default 8.2 GiB, 16 MiB 6.5 GiB,
8 MiB 3.3 GiB, 1 MiB 3.1 GiB — but 1 MiB maps so many small tensors that the tiny rung trains 40 %
slower, while 8 MiB trains it as fast as the default. So: 8 MiB.
`trim()` (malloc_trim) hands back freed heap pages between phases (after loading, after the base
evaluation), so the training window starts from what is really in use — and before every
training micro-batch (`StepTrim`). Without that the heap's resident free memory creeps from step
to step as its layout fragments: 0.6b LoRA+ckpt at seq 1024 peaked 4,331 → 4,388 → 4,448 →
4,736 MiB over four steps; trimmed, 4,391 MiB at every step. The price is re-faulting the freed
pages each step: +5 % step time at 0.6b, +29 % on the tiny rung on this (firecracker) VM, where a
fresh page costs ~0.3 ms/MiB more than a reused one.
Under gradient checkpointing also before each decoder layer's forward and backward
(`layer_trims`): each layer's freed set otherwise stays resident beside the next one's, so the
peak grew with the layer count (0.6b-l8 LoRA+ckpt seq 512 × 2: 1,981–2,004 MiB trimmed per step
only, 1,693 MiB trimmed per layer too, at the same step time; the tiny rung +15–40 %). Without
checkpointing a layer's saved tensors stay live until backward anyway: per step only.

Not glibc (macOS, musl) or not CPU: nothing is set, and `configure` says so in what it returns.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys
import time

from mens.plan.memory import shipped_constant

# one owner: the contract (the planner splits the activations by the same threshold)
MMAP_THRESHOLD_BYTES = int(shipped_constant("fixed_heap_mmap_mib")) * 2**20

M_MMAP_THRESHOLD = -3          # glibc's mallopt parameter number (malloc.h)


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def configure(backend: str, threshold: int = MMAP_THRESHOLD_BYTES) -> dict:
    """Fix glibc's mmap threshold for this process (CPU training). What was done, for telemetry."""
    libc = _libc() if backend == "cpu" else None
    if libc is None:
        why = "not CPU" if backend != "cpu" else "not glibc"
        return {"allocator": "default", "why": why}
    ok = bool(libc.mallopt(M_MMAP_THRESHOLD, ctypes.c_int(threshold)))
    return {"allocator": "glibc", "mmap_threshold_bytes": threshold if ok else None,
            "set": ok}


def trim() -> None:
    """Give freed heap pages back to the system (glibc's malloc_trim; nothing elsewhere)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(ctypes.c_size_t(0))


class Trims:
    """trim() counted: how many and the seconds they took (telemetry's heap_trims/heap_trim_s)."""
    def __init__(self):
        self.counts = {"heap_trims": 0, "heap_trim_s": 0.0}

    def __call__(self, *_) -> None:
        t0 = time.perf_counter()
        trim()
        self.counts["heap_trims"] += 1
        self.counts["heap_trim_s"] += time.perf_counter() - t0


def step_trim(trims: Trims):
    """A Lightning callback: trims before every training micro-batch. Every micro-batch then
    starts from the pages in use, so a step's peak is what that step touches, not what the
    heap's history left resident."""
    from lightning.pytorch.callbacks import Callback

    class StepTrim(Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            trims()

    return StepTrim()


def layer_trims(layers, trims: Trims) -> int:
    """Under gradient checkpointing: trims before each decoder layer's forward and before its
    backward (which recomputes it), while training. Each layer's freed set otherwise stays
    resident beside the next one's (the heap does not reuse it: small long-lived allocations
    land in its holes), and the step's peak grows with the layer count. Returns the layers hooked."""
    import torch

    def before_backward(grad):
        trims()
        return grad

    def before_forward(module, args, kwargs):
        if not (module.training and torch.is_grad_enabled()):
            return
        trims()
        hidden = args[0] if args else kwargs.get("hidden_states")
        if isinstance(hidden, torch.Tensor) and hidden.requires_grad:
            hidden.register_hook(before_backward)   # runs before this layer's backward

    for layer in layers:
        layer.register_forward_pre_hook(before_forward, with_kwargs=True)
    return len(layers)
