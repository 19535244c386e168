"""Peak-memory meters for calibration (mens/calibrate/measure.py) and every run, one per backend, and the Lightning
callback that opens the measurement window when training starts and reads it after every
optimizer step. Every reading is bytes above the baseline taken just before the model loads.
"""
from __future__ import annotations

import ctypes
import gc
import threading
import time


def meter_for(backend: str):
    return {"cpu": CpuMeter, "cuda": CudaMeter, "mps": MpsMeter}[backend]()


class _Sampler:
    """Polls fn() on a thread and keeps the maximum (for readings with no high-water mark)."""
    def __init__(self, fn, period_s: float = 0.02):
        self.fn, self.period, self.max = fn, period_s, 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            self.max = max(self.max, self.fn())
            time.sleep(self.period)

    def reset(self) -> None:
        self.max = self.fn()


class CpuMeter:
    """Linux: the kernel's own RSS high-water mark (VmHWM), reset by writing 5 to
    /proc/self/clear_refs — exact, nothing sampled. Elsewhere: RSS sampled every 20 ms."""

    def __init__(self):
        self.extra: dict = {}
        try:
            self._reset_hwm()
            self.kind = "cpu: VmHWM above the pre-model VmRSS (high-water mark reset at train start)"
            self.sampler = None
        except OSError:
            import psutil
            proc = psutil.Process()
            self.kind = "cpu: RSS sampled every 20 ms, above the pre-model RSS"
            self.sampler = _Sampler(lambda: proc.memory_info().rss)

    @staticmethod
    def _status(field: str) -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024      # kB
        raise OSError(f"{field} not in /proc/self/status")

    @staticmethod
    def _reset_hwm() -> None:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    def _rss(self) -> int:
        if self.sampler:
            return self.sampler.fn()
        return self._status("VmRSS")

    def _hwm(self) -> int:
        if self.sampler:
            return max(self.sampler.max, self.sampler.fn())
        return self._status("VmHWM")

    def _reset(self) -> None:
        self.sampler.reset() if self.sampler else self._reset_hwm()

    def baseline(self) -> int:
        gc.collect()
        try:   # hand freed heap back to the OS, so the baseline is what is really in use
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass
        self.base = self._rss()
        self._reset()
        return self.base

    def start(self) -> tuple[int, int]:
        """Opens the window. Returns (peak of loading — model, lane, evaluation — so far, what
        is resident as the window opens), both above the baseline."""
        load = self._hwm() - self.base
        self._reset()
        return load, self._rss() - self.base

    def read(self) -> int:
        return self._hwm() - self.base

    def safe_read(self) -> int | None:
        try:
            return self.read()
        except Exception:   # no baseline yet
            return None


class CudaMeter(CpuMeter):
    kind = "cuda: torch.cuda.max_memory_reserved above the pre-model reserved bytes"

    def __init__(self):
        import torch
        self.cuda, self.extra = torch.cuda, {}

    def baseline(self) -> int:
        self.cuda.synchronize()
        self.base, self.base_alloc = self.cuda.memory_reserved(), self.cuda.memory_allocated()
        return self.base

    def start(self) -> tuple[int, int]:
        self.cuda.synchronize()
        load = self.cuda.max_memory_reserved() - self.base
        self.cuda.reset_peak_memory_stats()
        return load, self.cuda.memory_reserved() - self.base

    def read(self) -> int:
        self.cuda.synchronize()
        reserved = self.cuda.max_memory_reserved() - self.base
        self.extra = {"max_reserved_bytes": reserved,
                      "max_allocated_bytes": self.cuda.max_memory_allocated() - self.base_alloc}
        return reserved


class MpsMeter(CpuMeter):
    kind = "mps: torch.mps.driver_allocated_memory sampled every 20 ms, above the pre-model value"

    def __init__(self):
        import torch
        self.extra = {}
        self.sampler = _Sampler(torch.mps.driver_allocated_memory)

    def baseline(self) -> int:
        self.base = self.sampler.fn()
        self.sampler.reset()
        return self.base


def window_opener(meter, before=None):
    """A Lightning callback that opens a run's window where calibration's opens it (at train
    start: after setup and, on resume, after the checkpoint restore), so the two compare."""
    from lightning.pytorch.callbacks import Callback

    class Opener(Callback):
        def on_train_start(self, trainer, module):
            if before:
                before()
            meter.start()

    return Opener()


def window_callback(meter, steps: int, say):
    """A Lightning callback: opens the window at train start, reads it after every optimizer
    step, and reports through say(**fields) (mens.calibrate writes them to measure.json)."""
    from lightning.pytorch.callbacks import Callback

    class Window(Callback):
        def on_train_start(self, trainer, module):
            self.readings, self.shapes, self.tokens, self.step = [], [], 0, 0
            load, resident = meter.start()
            self.t0 = time.time()
            say(window_started=True, load_peak_bytes=load, window_start_bytes=resident)

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            shape = list(batch["input_ids"].shape)          # (B, S)
            self.shapes.append(shape)
            self.tokens += shape[0] * shape[1]

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if trainer.global_step == self.step:            # accumulating: no step yet
                return
            self.step = trainer.global_step
            self.readings.append({"step": self.step, "peak_bytes": meter.read(),
                                  "t": time.time() - self.t0, "tokens": self.tokens})
            r = self.readings
            rate = step_s = None
            if len(r) >= 2:   # step 1 pays for warm-up: time steps 2..N
                dt = r[-1]["t"] - r[0]["t"]
                rate = (r[-1]["tokens"] - r[0]["tokens"]) / dt if dt > 0 else None
                step_s = dt / (len(r) - 1)
            say(steps=r, batch_shapes=self.shapes, window_complete=self.step >= steps,
                tokens_per_s=rate, step_s=step_s, extra=meter.extra)

    return Window()


def saved_bytes(arch, kind: str = "full", precision: str = "fp32", seq_len: int = 128,
                micro_batch: int = 2, seed: int = 0) -> int:
    """Bytes autograd keeps for backward after one packed forward of a random model of `arch`
    (mens.plan.memory.Arch) with the lane's trainable set: the count behind the contract's
    act_bytes (parameters themselves excluded; each storage counted once)."""
    import torch

    from mens.config.schema import LaneConfig, LoraConfig
    from mens.data.pack import block_causal_mask
    from mens.model.load import DTYPES, apply_lane, base_dtype, causal_lm_class, hf_config

    torch.manual_seed(seed)
    cfg = hf_config(arch)
    cfg._attn_implementation = "sdpa"
    model = causal_lm_class(arch)(cfg).to(base_dtype(kind, precision))
    if kind != "full":   # LoRA r16 on every linear layer (the schema's default targets)
        model = apply_lane(model, LaneConfig(name="meter", method="lora", lora=LoraConfig(r=16),
                                             gradient_checkpointing=False))
    model.train()
    s, b = seq_len, micro_batch
    seg = torch.ones(b, s, dtype=torch.long)
    seg[:, s // 2:] = 2                                      # two records per row
    batch = {"input_ids": torch.randint(0, arch.vocab, (b, s)),
             "labels": torch.randint(0, arch.vocab, (b, s)),
             "position_ids": torch.arange(s).expand(b, s), "attention_mask": block_causal_mask(seg)}
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t

    # as Lightning's "bf16-mixed"/"16-mixed": autocast over fp32 masters or a 16-bit base
    half = precision != "fp32"
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            torch.autocast("cpu", dtype=getattr(torch, DTYPES[precision]), enabled=half):
        model(**batch)
    return sum(seen.values())
