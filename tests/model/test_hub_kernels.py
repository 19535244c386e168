"""mens loads every pretrained base with transformers' Hub kernels off: transformers ≥ 5.24
defaults `use_kernels` to True, which on CUDA fetches kernels-community/* code from the Hub at load
time (unpinned; offline, the load fails — the first CUDA sitting's qlora jobs stopped on it) and
trains on kernels the plan never measured. The default is True on this CPU too, so this fails
without mens's explicit `use_kernels=False`."""
from __future__ import annotations

from mens.config.compose import compose


def test_pretrained_base_loads_without_hub_kernels():
    from transformers import AutoModelForCausalLM

    from mens.model.load import load_base, weights_dir

    cfg = compose(["+rung=tiny"])
    assert AutoModelForCausalLM.from_pretrained(str(weights_dir(cfg.rung))).use_kernels, \
        "transformers' default changed: this test no longer shows what mens turns off"
    model = load_base(cfg.rung, kind="lora")
    assert model.use_kernels is False
