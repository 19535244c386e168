"""Per-record attention (mens.train.attention) is the block mask's math without its S² cost.

Tiny random-weight Qwen3s (fp32) and real chat records packed by mens.data.pack, built with the
packing tests' tokenizer and records: packed per-record losses equal separate runs, gradients
equal the 4-D mask path's (also under gradient checkpointing, whose recompute runs outside any
context), a control that ignores the records leaks, and no B·S² tensor is ever allocated.
"""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from data.test_pack import SEQ, alone, make_examples, make_tokenizer, per_record, qwen
from mens.data.pack import Example, collate, mask_dtype_for, pack, pad_batch
from mens.train.attention import (PACKED, packed_attention_forward, register, segments,
                                  supports_packed, use_packed_attention)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # tiny model: intra-op threads only fight other processes
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def examples():
    from transformers import PreTrainedTokenizerFast
    return make_examples(PreTrainedTokenizerFast(tokenizer_object=make_tokenizer()))


def model(kv_heads: int = 2):
    """test_pack's Qwen3 (4 heads; kv_heads 2 = GQA, 4 = MHA), sdpa, train mode (no dropout)."""
    m = qwen("sdpa")
    if kv_heads != 2:
        from transformers import Qwen3ForCausalLM
        cfg = m.config
        cfg.num_key_value_heads = kv_heads
        torch.manual_seed(0)
        m = Qwen3ForCausalLM(cfg).float()
    return m.train()


def grads(m, batch) -> dict[str, torch.Tensor]:
    m.zero_grad(set_to_none=True)
    m(**batch).loss.backward()
    return {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


def assert_close_grads(a: dict, b: dict, atol=1e-6, rtol=1e-4):
    assert a.keys() == b.keys() and a
    for n in a:
        torch.testing.assert_close(a[n], b[n], atol=atol, rtol=rtol, msg=n)


def leaky_attention(module, q, k, v, mask, **kw):
    """CONTROL: the same attention fn, told the whole row is one record (segments ignored)."""
    S = q.shape[2]
    return packed_attention_forward(module, q, k, v, mask, **{**kw, "position_ids": torch.arange(S)[None]})


def use_leaky(m):
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    from mens.train.attention import packed_mask
    AttentionInterface.register("mens_test_leaky", leaky_attention)
    AttentionMaskInterface.register("mens_test_leaky", packed_mask)
    m.set_attn_implementation("mens_test_leaky")


# ---------------------------------------------------------------------------- exactness

@pytest.mark.parametrize("kv_heads", [2, 4], ids=["gqa", "mha"])
def test_packed_path_equals_separate_runs_and_mask_path_gradients(kv_heads, examples):
    m = model(kv_heads)
    with torch.no_grad():
        ref = alone(m.eval(), examples)
    m.train()
    rows = pack(examples, seq_len=SEQ)
    assert all(len(r.record_ids) >= 3 and 0 in r.segment_ids for r in rows)   # packed and padded
    masked = grads(m, collate(rows))                                           # 4-D mask path
    assert use_packed_attention(m, SEQ) == (True, "")
    assert m.config._attn_implementation == m.model.config._attn_implementation == PACKED
    batch = collate(rows, mask=False)
    assert "attention_mask" not in batch
    with torch.no_grad():
        out = m(**batch)
    packed = per_record(rows, out.logits, batch["labels"])
    assert packed.keys() == ref.keys()
    for rid in ref:
        assert packed[rid] == pytest.approx(ref[rid], abs=1e-5), rid
    assert_close_grads(grads(m, batch), masked)

    # CONTROL: the same fn over the whole row leaks into every later record, forward and backward
    use_leaky(m)
    with torch.no_grad():
        leaky = per_record(rows, m(**batch).logits, batch["labels"])
    for row in rows:
        first, *later = row.record_ids
        assert leaky[first] == pytest.approx(ref[first], abs=1e-5)
        assert all(abs(leaky[rid] - ref[rid]) > 1e-3 for rid in later)
    g = grads(m, batch)
    assert max((g[n] - masked[n]).abs().max().item() for n in g) > 1e-3


def test_gradient_checkpointing_recompute_uses_packed_attention_with_lora(examples):
    """Checkpointed layers rerun their forward inside backward(): the per-model switch (not a
    context manager) makes the recompute per-record too. PEFT's model.config reaches the base."""
    from peft import LoraConfig, get_peft_model

    rows = pack(examples, seq_len=SEQ)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      init_lora_weights=False)   # B ≠ 0: every LoRA weight gets a gradient

    def peft(checkpointing: bool):
        base = model()
        if checkpointing:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            base.config.use_cache = False
            base.enable_input_require_grads()
        torch.manual_seed(1)
        return get_peft_model(base, lora).train()

    masked = grads(peft(False), collate(rows))
    m = peft(True)
    assert use_packed_attention(m, SEQ) == (True, "") and m.config._attn_implementation == PACKED
    assert m.base_model.model.model.layers[0].gradient_checkpointing
    got = grads(m, collate(rows, mask=False))
    assert got.keys() == masked.keys() and all("lora_" in n for n in got)
    assert_close_grads(got, masked)
    # CONTROL: switching back to sdpa between forward and backward (what a context manager
    # would do) recomputes a different attention — torch's checkpoint notices and refuses.
    from torch.utils.checkpoint import CheckpointError
    loss = m(**collate(rows, mask=False)).loss
    m.base_model.model.set_attn_implementation("sdpa")
    with pytest.raises(CheckpointError, match="recomputation"):
        loss.backward()


FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 4096}),   # ≥ row: no effect
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"sliding_window": SEQ}),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_other_families_packed_path_equals_mask_path(family, examples):
    """Every family mens trains looks the attention up at forward time, so the switch reaches it."""
    import transformers
    conf, cls, extra = FAMILIES[family]
    cfg = getattr(transformers, conf)(vocab_size=300, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=16, initializer_range=0.1,
                                      attn_implementation="sdpa", **extra)
    torch.manual_seed(0)
    m = getattr(transformers, cls)(cfg).float().eval()
    rows = pack(examples, seq_len=SEQ)
    real = torch.tensor([r.segment_ids for r in rows]) != 0                      # (B, S)
    with torch.no_grad():
        want = m(**collate(rows)).logits[real]
        assert use_packed_attention(m, SEQ) == (True, "")
        got = m(**collate(rows, mask=False)).logits[real]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------- memory

class BigTensors(TorchDispatchMode):
    """Records every op output with at least `limit` elements (forward and backward)."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit, self.seen = limit, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.numel() >= self.limit:
                self.seen.append((str(func), tuple(t.shape)))
        return out


def test_packed_path_allocates_no_b_s2_tensor(examples):
    S = 1024
    many = [Example(e.input_ids, e.labels, 0, f"{k}-{e.record_id}") for k in range(4) for e in examples]
    rows = pack(many, seq_len=S)
    B = len(rows)
    assert B >= 2 and all(len(r.record_ids) >= 8 for r in rows)
    m = model()
    for batch_kw, want_big in (({}, True), ({"mask": False}, False)):
        if not want_big:
            assert use_packed_attention(m, S)[0]
        spy = BigTensors(B * S * S)
        with spy:
            m(**collate(rows, **batch_kw)).loss.backward()
        # the mask path trips the detector (so it can fail); the packed path never does
        assert bool(spy.seen) == want_big, spy.seen[:3]


# ---------------------------------------------------------------------------- refusals

def test_supports_packed_refuses_softcap_and_short_sliding_windows():
    from transformers import (Gemma2Config, Gemma3TextConfig, MistralConfig, Qwen2Config,
                              Qwen3Config)
    ok, why = supports_packed(Gemma2Config(), 512)
    assert not ok and "soft-caps" in why and "4-D block mask" in why
    ok, why = supports_packed(MistralConfig(sliding_window=256), 512)
    assert not ok and "sliding-window" in why and "256" in why
    assert supports_packed(MistralConfig(sliding_window=4096), 512) == (True, "")
    assert supports_packed(MistralConfig(sliding_window=None), 512) == (True, "")
    assert not supports_packed(Gemma3TextConfig(sliding_window=512), 1024)[0]
    assert supports_packed(Gemma3TextConfig(sliding_window=512), 512) == (True, "")
    assert supports_packed(Qwen3Config(), 4096) == (True, "")
    assert supports_packed(Qwen2Config(use_sliding_window=False), 4096) == (True, "")


def test_refused_model_is_left_alone_and_runtime_guard_catches_a_forced_window(examples):
    from transformers import MistralConfig, MistralForCausalLM
    cfg = MistralConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        sliding_window=32, attn_implementation="sdpa")
    m = MistralForCausalLM(cfg)
    ok, why = use_packed_attention(m, SEQ)
    assert not ok and "32 tokens" in why and m.config._attn_implementation == "sdpa"
    register()
    m.set_attn_implementation(PACKED)   # forced past the check: a record longer than the window
    with pytest.raises(RuntimeError, match="sliding window"):
        m(**collate(pack(examples, seq_len=SEQ), mask=False))


# ---------------------------------------------------------------------------- standard paths

def test_pad_batch_eval_and_generation_keep_the_standard_sdpa_path(examples):
    plain, packed = model().eval(), model().eval()
    assert use_packed_attention(packed, SEQ)[0]
    assert mask_dtype_for(packed) is None            # a 4-D mask for it is SDPA's bool one
    batch = pad_batch(examples, seq_len=SEQ)
    with torch.no_grad():
        assert torch.equal(plain(**batch).logits, packed(**batch).logits)
        rows = pack(examples, seq_len=SEQ)            # the 4-D mask path still works as before
        assert torch.equal(plain(**collate(rows)).logits, packed(**collate(rows)).logits)
    prompts = [examples[0].input_ids[:9], examples[1].input_ids[:5]]   # left-padded batch
    ids = torch.tensor([[0] * (9 - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (9 - len(p)) + [1] * len(p) for p in prompts])
    gen = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(plain.generate(input_ids=ids, attention_mask=mask, **gen),
                       packed.generate(input_ids=ids, attention_mask=mask, **gen))


def test_segments_from_position_resets_and_from_cu_seq_lens():
    pos = torch.tensor([[0, 1, 2, 0, 1, 0, 0, 1], [0, 1, 2, 3, 4, 5, 0, 1]])
    segs = segments(pos, 2, 8)
    assert segs == [[(0, 3), (3, 5), (5, 6), (6, 8)], [(0, 6), (6, 8)]]
    assert segments(None, 2, 8, torch.tensor([0, 3, 5, 6, 8, 14, 16])) == segs
    with pytest.raises(ValueError, match="crosses a row"):
        segments(None, 2, 8, torch.tensor([0, 6, 10, 16]))
