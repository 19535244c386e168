"""Chunked linear cross-entropy (mens.train.chunked_ce) against the plain loss: values and
gradients in fp32 (float rounding) and bf16 (bf16 rounding of logits and of the weight-gradient
accumulation), soft-cap, ignored rows, ragged chunks; no (N, V) tensor is ever made; and at model
level, equal to `model(**batch, labels=...).loss` for Qwen3 (tied), Llama (untied), Gemma 2
(soft-cap) and a PEFT LoRA model."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from mens.errors import ConfigError
from mens.train.chunked_ce import (causal_lm_loss, chunk_rows, decoder_and_head,
                                   hidden_and_head, row_logps, token_logps)

V, H = 4096, 64


def plain_logps(h, w, labels, softcap=None, bias=None):
    """What HF does: matmul (and soft-cap) in the model dtype, then fp32 log-softmax."""
    z = h @ w.t() if bias is None else h @ w.t() + bias
    if softcap:
        z = torch.tanh(z / softcap) * softcap
    lp = torch.gather(F.log_softmax(z.float(), -1), 1, labels.clamp(min=0)[:, None])[:, 0]
    return lp * (labels != -100)


def plain_loss(h, w, labels, softcap=None):
    z = h @ w.t()
    if softcap:
        z = torch.tanh(z / softcap) * softcap
    z = z.float()[:, :-1]
    return F.cross_entropy(z.reshape(-1, z.shape[-1]), labels[:, 1:].reshape(-1))


def inputs(n=300, dtype=torch.float32, seed=0, weight_grad=True):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, H, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(V, H, generator=g) * 0.3).to(dtype).requires_grad_(weight_grad)
    labels = torch.randint(0, V, (n,), generator=g)
    labels[::3] = -100
    labels[40:120] = -100          # with chunk 37: rows 74..110 are a wholly ignored chunk
    return h, w, labels


def rel(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def test_chunk_rows():
    assert chunk_rows(151936, 128 * 2**20) == 220
    assert chunk_rows(4096, 64 * 2**20) == 4096
    assert chunk_rows(10**9, 1) == 1


@pytest.mark.parametrize("softcap", [None, 30.0])
@pytest.mark.parametrize("chunk", [37, 1000])
def test_token_logps_fp32(chunk, softcap):
    h, w, labels = inputs()
    ours = token_logps(h, w, labels, chunk=chunk, softcap=softcap)
    ref = plain_logps(h, w, labels, softcap)
    assert ours.dtype == torch.float32 and ours.shape == (300,)
    assert torch.allclose(ours, ref, rtol=1e-5, atol=1e-5)
    assert (ours[labels == -100] == 0).all()
    up = torch.randn(300)          # any upstream gradient, as DPO's per-row sums give
    g_ours = torch.autograd.grad((ours * up).sum(), (h, w))
    g_ref = torch.autograd.grad((ref * up).sum(), (h, w))
    for a, b in zip(g_ours, g_ref):
        assert rel(a, b) < 1e-5


def test_token_logps_bias_and_frozen_weight():
    h, w, labels = inputs(weight_grad=False)
    bias = torch.randn(V, requires_grad=True)
    ours = token_logps(h, w, labels, chunk=64, bias=bias)
    ref = plain_logps(h, w, labels, bias=bias)
    assert torch.allclose(ours, ref, rtol=1e-5, atol=1e-5)
    ours.sum().backward()
    gh, gb = h.grad.clone(), bias.grad.clone()
    assert w.grad is None          # a frozen head gets no gradient (LoRA, frozen tied embeddings)
    h.grad = bias.grad = None
    ref.sum().backward()
    assert rel(gh, h.grad) < 1e-5 and rel(gb, bias.grad) < 1e-5


@pytest.mark.parametrize("grad_in_forward", [True, False])
@pytest.mark.parametrize("softcap", [None, 30.0])
def test_causal_lm_loss_fp32(grad_in_forward, softcap):
    h, w, labels = inputs()
    h3, lab3 = h.reshape(3, 100, H), labels.reshape(3, 100)
    ours = causal_lm_loss(h3, w, lab3, chunk=37, softcap=softcap, grad_in_forward=grad_in_forward)
    ref = plain_loss(h3, w, lab3, softcap)
    assert abs(ours.item() - ref.item()) <= 1e-5 * abs(ref.item())
    g_ours = torch.autograd.grad(ours * 2.5, (h, w))   # a non-unit upstream gradient
    g_ref = torch.autograd.grad(ref * 2.5, (h, w))
    for a, b in zip(g_ours, g_ref):
        assert rel(a, b) < 1e-5


def test_grad_in_forward_takes_one_backward():
    h, w, labels = inputs()
    loss = causal_lm_loss(h[None], w, labels[None], chunk=64)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="grad_in_forward=False"):
        loss.backward()


def test_causal_lm_loss_no_grad_and_all_ignored():
    h, w, labels = inputs()
    with torch.no_grad():
        assert torch.allclose(causal_lm_loss(h[None], w, labels[None], chunk=50),
                              plain_loss(h[None], w, labels[None]), rtol=1e-5)
    none = torch.full_like(labels, -100)[None]
    assert torch.isnan(causal_lm_loss(h[None], w, none)) == torch.isnan(plain_loss(h[None], w, none))


# bf16: both paths round the (c, V) logits to bf16 before the fp32 log-softmax; the remaining
# differences are bf16 rounding (relative 2^-8 ≈ 4e-3) of the soft-cap (HF caps in bf16, we in
# fp32), of the logits gradient cast, and of grad_weight accumulated chunk by chunk in bf16.
@pytest.mark.parametrize("softcap,tol", [(None, 1e-2), (30.0, 3e-2)])
def test_bf16(softcap, tol):
    h, w, labels = inputs(dtype=torch.bfloat16)
    h3, lab3 = h.reshape(3, 100, H), labels.reshape(3, 100)
    ours = causal_lm_loss(h3, w, lab3, chunk=37, softcap=softcap)
    ref = plain_loss(h3, w, lab3, softcap)
    assert ours.dtype == torch.float32 and abs(ours.item() - ref.item()) < 1e-3 * ref.item()
    for a, b in zip(torch.autograd.grad(ours, (h, w)), torch.autograd.grad(ref, (h, w))):
        assert a.dtype == torch.bfloat16 and rel(a, b) < tol
    lp = token_logps(h, w, labels, chunk=37, softcap=softcap)
    lp_ref = plain_logps(h, w, labels, softcap)
    # same bf16 logits, fp32 log-softmax: equal to fp32 rounding; the soft-cap rounded to bf16
    # by HF (|logit| ≤ 30, bf16 step 0.125 there) moves log-probs by up to ~0.03
    assert (lp - lp_ref).abs().max() < (5e-2 if softcap else 1e-5)


class Sizes(TorchDispatchMode):
    """Largest tensor any aten op produces (numel)."""
    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("grad_in_forward", [True, False])
def test_never_holds_n_by_v(grad_in_forward):
    h, w, labels = inputs(n=512)
    with Sizes() as ours:
        causal_lm_loss(h[None], w, labels[None], chunk=64,
                       grad_in_forward=grad_in_forward).backward()
        token_logps(h, w, labels, chunk=64).sum().backward()
    with Sizes() as plain:
        plain_loss(h[None], w, labels[None]).backward()
    assert plain.largest >= 511 * V
    assert ours.largest == max(64 * V, V * H)     # one chunk of logits, or grad_weight


# ---- model level: the decoder's hidden states + the head equal the model's own loss ----

def tiny(family: str, **extra):
    import transformers

    small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                 max_position_embeddings=256, head_dim=16)
    cls = {"qwen3": "Qwen3", "llama": "Llama", "gemma2": "Gemma2"}[family]
    config = getattr(transformers, cls + "Config")(**small, **extra)
    torch.manual_seed(0)
    return getattr(transformers, cls + "ForCausalLM")(config).float()


def batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 512, (2, 24), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 18:] = 0
    labels = ids.clone()
    labels[:, :6] = -100           # prompt
    labels[mask == 0] = -100
    pos = torch.arange(24).expand(2, 24)
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos), labels


@pytest.mark.parametrize("family,extra", [
    ("qwen3", dict(tie_word_embeddings=True)),
    ("llama", dict(tie_word_embeddings=False)),
    ("gemma2", dict(final_logit_softcapping=5.0, query_pre_attn_scalar=16, sliding_window=8)),
])
def test_model_loss_equal(family, extra):
    model = tiny(family, **extra)
    inp, labels = batch()
    ref = model(**inp, labels=labels).loss
    ref_grads = torch.autograd.grad(ref, list(model.parameters()))
    hidden, weight, bias, softcap = hidden_and_head(model, dict(inp, labels=labels))
    assert softcap == extra.get("final_logit_softcapping")
    ours = causal_lm_loss(hidden, weight, labels, chunk=7, softcap=softcap, bias=bias)
    assert abs(ours.item() - ref.item()) < 1e-5 * ref.item()
    for a, b in zip(torch.autograd.grad(ours, list(model.parameters())), ref_grads):
        assert rel(a, b) < 1e-4     # through the decoder: fp32 sums in another order


def test_autocast_bf16_like_hf():
    """Lightning's bf16-mixed: fp32 weights, autocast; HF's lm_head then runs in bf16."""
    model = tiny("llama", tie_word_embeddings=False)
    inp, labels = batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = model(**inp, labels=labels).loss
        ref_grads = torch.autograd.grad(ref, list(model.parameters()))
        hidden, weight, bias, softcap = hidden_and_head(model, inp)
        ours = causal_lm_loss(hidden, weight, labels, chunk=7)
        grads = torch.autograd.grad(ours, list(model.parameters()))
        logits = model(**inp).logits[:, :-1].float()
        want = (torch.gather(F.log_softmax(logits, -1), 2, labels[:, 1:].clamp(min=0)[..., None])
                [..., 0] * (labels[:, 1:] != -100)).sum(-1)
        got = row_logps(hidden_and_head(model, inp)[0], weight, labels, chunk=7)
    # per-row sums of ~20 log-probs of ~-5: fp32 matmul logits would differ by ~1e-3
    assert (got - want).abs().max() < 1e-4
    assert abs(ours.item() - ref.item()) < 1e-5 * ref.item()    # the same bf16 logits
    assert grads[-1].dtype == torch.float32 and model.lm_head.weight is weight
    for a, b in zip(grads, ref_grads):
        assert rel(a, b) < 2e-2     # bf16 gradient rounding, grad_weight summed per chunk


def test_peft_lora_equal():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny("qwen3", tie_word_embeddings=True),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for name, p in model.named_parameters():     # B ≠ 0 so LoRA changes the output
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)
    inp, labels = batch()
    trainable = [p for p in model.parameters() if p.requires_grad]
    ref = model(**inp, labels=labels).loss
    ref_grads = torch.autograd.grad(ref, trainable)
    hidden, weight, bias, softcap = hidden_and_head(model, inp)
    assert not weight.requires_grad and softcap is None
    ours = causal_lm_loss(hidden, weight, labels, chunk=5)
    assert abs(ours.item() - ref.item()) < 1e-5 * ref.item()
    for a, b in zip(torch.autograd.grad(ours, trainable), ref_grads):
        assert rel(a, b) < 1e-4
    # DPO's per-row sums: token_logps on the flattened, shifted rows
    logits = model(**inp).logits[:, :-1].float()
    want = (torch.gather(F.log_softmax(logits, -1), 2, labels[:, 1:].clamp(min=0)[..., None])[..., 0]
            * (labels[:, 1:] != -100)).sum(-1)
    got = token_logps(hidden[:, :-1].reshape(-1, 64), weight, labels[:, 1:].reshape(-1),
                      chunk=9).view(2, 23).sum(-1)
    assert torch.allclose(got, want, rtol=1e-5)
    assert torch.allclose(row_logps(hidden, weight, labels, chunk=9), want, rtol=1e-5)
    g_want = torch.autograd.grad(want @ torch.tensor([1.0, -2.0]), trainable)
    hidden = hidden_and_head(model, inp)[0]          # the first graph was freed by grad()
    got = row_logps(hidden, weight, labels, chunk=9) @ torch.tensor([1.0, -2.0])
    for a, b in zip(torch.autograd.grad(got, trainable), g_want):
        assert rel(a, b) < 1e-4


def test_lora_on_head_refused():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny("llama"), LoraConfig(r=4, target_modules=["q_proj", "lm_head"]))
    with pytest.raises(ConfigError, match="lane.lora.targets"):
        decoder_and_head(model)
