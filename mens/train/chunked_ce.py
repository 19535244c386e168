"""Chunked (fused) linear cross-entropy: the causal-LM loss and per-token log-probs computed
from the last hidden states and the lm_head weight, a chunk of rows at a time, so the (N, V)
logits — the largest activation of a small model with Qwen3's 151,936-token vocabulary — and
their gradient never exist at once.

Numerics follow transformers' ForCausalLMLoss: the chunk's logits come out of the matmul in the
model's dtype and are upcast to fp32 for log-softmax; a final-logit soft-cap (Gemma 2) is applied
to the fp32 chunk (cap·tanh(z/cap)), its gradient included. In fp32 the results equal the plain
path to float rounding; in bf16 to bf16 rounding of the logits (see the tests for the bounds).

Gradients: `token_logps` is a custom autograd Function whose backward recomputes each chunk's
logits (checkpointed chunks). `causal_lm_loss` has a scalar output, so its gradient is known up
to one scalar factor in forward: it computes grad_hidden (and grad_weight) chunk by chunk
while it has the logits (Liger's way) and its backward only scales them — one lm_head matmul
fewer per chunk than recomputing, at the same peak. Measured on CPU (1 thread, fp32, 0.6b head
V 151,936, H 1024, N 2048, 220-row chunks, forward+backward): frozen head plain 10.3 s / 4,754 MiB,
grad-in-forward 9.2 s / 144 MiB, recompute 13.4 s / 144 MiB; trainable head 14.2 s, 13.7 s,
17.5 s (737 MiB both chunked ways, 593 of it the weight gradient). Hence grad-in-forward is the
default. When grad is not needed (eval, no_grad) it only computes the loss.

Peak extra memory, c = chunk rows, V = vocab, H = hidden, N = rows, d = bytes of the model dtype
(2 for bf16/fp16, 4 for fp32). Every (c, V) op runs in place in one set of buffers allocated
once per call (see _Buffers):
  chunk buffers   B = c·V·4 (fp32 logits) + c·V·4 with a soft-cap (tanh, kept for its
                  derivative) + c·V·d when d < 4 (the matmul's output before the upcast, reused
                  for the gradient cast back to the model dtype); O(c) row temporaries besides.
  token_logps     forward B + N·8 (output, saved logsumexp); backward B + N·H·d (grad_hidden)
  causal_lm_loss  (grad in forward) forward B + N·H·d (grad_hidden, kept until backward, which
                  scales it in place); (recompute) as token_logps.
  weight grad     only when the head requires grad: one (V, H) tensor in the weight's dtype,
                  accumulated in place with addmm (as Liger does; no fp32 (V, H) copy) — the same
                  size as the gradient the plain path produces.
  autocast        (Lightning's bf16-mixed) hidden and weight are cast to the autocast dtype
                  first — a (V, H) copy, as autocast makes for HF's lm_head too — and d = 2.
So fp32 without soft-cap needs c·V·4, bf16 c·V·6, bf16 with soft-cap c·V·10: the planner's
c·V·(4 + 4) covers the first two. (The plain path, as the tests write it, peaked at N·V·16
bytes in fp32: logits, their shifted copy, log-softmax, gradient.)

Backends: the same torch code runs on CPU, CUDA and MPS (MPS: unmeasured here). On CUDA with
`liger_kernel` installed, `causal_lm_loss` uses LigerFusedLinearCrossEntropyLoss instead
(untested here: no CUDA machine; `token_logps` always uses the torch code).
"""
from __future__ import annotations

from mens.plan.memory import shipped_constant

IGNORE = -100
# bytes of one chunk's fp32 logits (the contract's model.logits_chunk_mib: what the planner
# models; why that size is said there)
DEFAULT_BUDGET = int(shipped_constant("logits_chunk_mib")) * 2**20


def chunk_rows(vocab: int, budget_bytes: int = DEFAULT_BUDGET) -> int:
    """Rows per chunk so that one chunk's fp32 logits take about `budget_bytes`:
    151,936-token vocab at 128 MiB → 220 rows; 4,096 → 8,192."""
    return max(1, budget_bytes // (vocab * 4))


class _Buffers:
    """One chunk's work space, allocated once per call and reused by every chunk; every (c, V)
    op below runs in place on it, so the peak is these buffers and nothing else of size c·V
    (measured at V 4,096, N 2,048, fp32: 66 MiB with out-of-place ops, 36 MiB in place)."""
    def __init__(self, hidden, weight, chunk, softcap):
        import torch

        rows, vocab = min(chunk, hidden.shape[0]), weight.shape[0]
        self.z = hidden.new_empty(rows, vocab, dtype=torch.float32)          # fp32 logits
        self.t = torch.empty_like(self.z) if softcap is not None else None   # tanh(z/cap)
        low = hidden.dtype != torch.float32
        self.lp = hidden.new_empty(rows, vocab) if low else None             # matmul in model dtype


def _chunk_logits(h, weight, bias, softcap, buf):
    """(c, H) → fp32 logits (c, V) after the soft-cap, and tanh (for its gradient) or None."""
    import torch

    n = h.shape[0]
    z = buf.z[:n]
    out = z if buf.lp is None else buf.lp[:n]
    torch.mm(h, weight.t(), out=out)                   # like HF: matmul in model dtype, ...
    if bias is not None:
        out += bias
    if buf.lp is not None:
        z.copy_(out)                                   # ... then the upcast
    if softcap is None:
        return z, None
    t = torch.div(z, softcap, out=buf.t[:n]).tanh_()
    return torch.mul(t, softcap, out=z), t


def _exp_lse(z):
    """In place z → exp(z − max); returns (logsumexp (c,), row sums (c, 1))."""
    m = z.amax(-1, keepdim=True)
    s = z.sub_(m).exp_().sum(-1, keepdim=True)
    return (m + s.log())[:, 0], s


def _chunk_grad(p, t, labels, g):
    """softmax p (c, V) in place → d(g · log p(label)) / d(pre-cap logits)
    = g·(onehot − softmax)·(1 − t²)."""
    import torch

    p.mul_(-g[:, None])
    p[torch.arange(len(labels), device=p.device), labels] += g     # ignored rows have g = 0
    if t is not None:
        p.mul_(t.mul_(t).neg_().add_(1))               # d cap·tanh(z/cap) / dz, t consumed
    return p


def _function_classes():
    """Defined lazily: torch is imported inside functions (house rule: cheap imports)."""
    global _CLASSES
    if _CLASSES:
        return _CLASSES
    import torch

    class _Logps(torch.autograd.Function):
        @staticmethod
        def forward(ctx, hidden, weight, bias, labels, chunk, softcap):
            n = hidden.shape[0]
            out = hidden.new_empty(n, dtype=torch.float32)
            lse = hidden.new_empty(n, dtype=torch.float32)
            safe, buf = labels.clamp(min=0), _Buffers(hidden, weight, chunk, softcap)
            for i in range(0, n, chunk):
                z, _ = _chunk_logits(hidden[i:i + chunk], weight, bias, softcap, buf)
                target = z.gather(1, safe[i:i + chunk, None])[:, 0]
                lse[i:i + chunk] = _exp_lse(z)[0]
                out[i:i + chunk] = target - lse[i:i + chunk]
            out.masked_fill_(labels == IGNORE, 0.0)
            ctx.save_for_backward(hidden, weight, bias, labels, lse)
            ctx.chunk, ctx.softcap = chunk, softcap
            return out

        @staticmethod
        def backward(ctx, grad_out):
            hidden, weight, bias, labels, lse = ctx.saved_tensors
            g = grad_out.float().masked_fill(labels == IGNORE, 0.0)
            chunk, softcap, need = ctx.chunk, ctx.softcap, ctx.needs_input_grad
            grads = _Grads(hidden, weight, bias, need[0], need[1], need[2])
            safe, buf = labels.clamp(min=0), _Buffers(hidden, weight, chunk, softcap)
            for i in range(0, hidden.shape[0], chunk):    # recompute each chunk's logits
                h = hidden[i:i + chunk]
                z, t = _chunk_logits(h, weight, bias, softcap, buf)
                p = z.sub_(lse[i:i + chunk, None]).exp_()
                grads.add(_chunk_grad(p, t, safe[i:i + chunk], g[i:i + chunk]), h, weight, i, buf)
            return grads.gh, grads.gw, grads.gb, None, None, None

    class _Loss(torch.autograd.Function):
        """Mean NLL over valid rows with gradients computed in forward (scalar output)."""
        @staticmethod
        def forward(ctx, hidden, weight, bias, labels, chunk, softcap, need_h, need_w, need_b,
                    num_items):
            valid = labels != IGNORE
            count = valid.sum() if num_items is None else num_items
            g = valid.float().neg_() / count                  # d loss / d logp per row
            nll = hidden.new_zeros((), dtype=torch.float32)
            grads = _Grads(hidden, weight, bias, need_h, need_w, need_b)
            safe, buf = labels.clamp(min=0), _Buffers(hidden, weight, chunk, softcap)
            for i in range(0, hidden.shape[0], chunk):
                h, lab = hidden[i:i + chunk], safe[i:i + chunk]
                z, t = _chunk_logits(h, weight, bias, softcap, buf)
                target = z.gather(1, lab[:, None])[:, 0]
                lse, s = _exp_lse(z)
                nll -= ((target - lse) * valid[i:i + chunk]).sum()
                grads.add(_chunk_grad(z.div_(s), t, lab, g[i:i + chunk]), h, weight, i, buf)
            ctx.grads, ctx.used = (grads.gh, grads.gw, grads.gb), False
            return nll / count

        @staticmethod
        def backward(ctx, grad_out):
            # scaled in place: no second (N, H) / (V, H) copy, so the graph takes one backward
            if ctx.used:
                raise RuntimeError("causal_lm_loss(grad_in_forward=True) supports one backward "
                                   "per forward; pass grad_in_forward=False to retain_graph")
            ctx.used = True
            gh, gw, gb = (None if x is None else x.mul_(grad_out.to(x.dtype)) for x in ctx.grads)
            ctx.grads = ()
            return gh, gw, gb, None, None, None, None, None, None, None

    _CLASSES = (_Logps, _Loss)
    return _CLASSES


_CLASSES = ()


class _Grads:
    """grad_hidden (N, H), grad_weight (V, H) and grad_bias, filled chunk by chunk in the
    inputs' dtypes (grad_weight accumulated with addmm, as Liger does: no fp32 (V, H) copy)."""
    def __init__(self, hidden, weight, bias, need_h, need_w, need_b):
        import torch

        self.gh = torch.empty_like(hidden) if need_h else None
        self.gw = torch.zeros_like(weight) if need_w else None
        self.gb = torch.zeros_like(bias) if need_b else None

    def add(self, dz, h, weight, i, buf):
        import torch

        if buf.lp is not None:                 # like autograd through HF's .float(): the
            dz = buf.lp[:len(h)].copy_(dz)     # logits gradient is cast to the model dtype
        if self.gh is not None:
            torch.mm(dz, weight, out=self.gh[i:i + len(h)])
        if self.gw is not None:
            self.gw.addmm_(dz.t(), h)
        if self.gb is not None:
            self.gb += dz.sum(0).to(self.gb.dtype)


def token_logps(hidden, weight, labels, chunk: int | None = None, softcap: float | None = None,
                bias=None):
    """log p(label) per row, fp32 (N,): hidden (N, H) in the model's dtype, weight (V, H) the
    lm_head, labels (N,) with IGNORE (-100) rows giving 0. Never holds more than `chunk` rows of
    logits (default chunk_rows(V)). Gradients flow to hidden, and to weight/bias only where they
    require grad (a frozen or LoRA-untouched head costs no weight gradient)."""
    import torch

    logps, _ = _function_classes()
    chunk = chunk or chunk_rows(weight.shape[0])
    hidden, weight, bias = _autocast(hidden, weight, bias)
    with torch.autocast(hidden.device.type, enabled=False):
        return logps.apply(hidden.contiguous(), weight, bias, labels, chunk, softcap)


def _autocast(hidden, weight, bias):
    """Under autocast (Lightning's bf16-mixed) HF's lm_head runs in the autocast dtype: cast the
    inputs as autocast would (a (V, H) weight copy in that dtype, as autocast makes too; autograd
    casts the gradients back), so the numerics and the fast low-precision matmul are the same."""
    import torch

    device = hidden.device.type
    if not torch.is_autocast_enabled(device):
        return hidden, weight, bias
    dtype = torch.get_autocast_dtype(device)
    return (hidden.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype))


def causal_lm_loss(hidden, weight, labels, chunk: int | None = None,
                   softcap: float | None = None, bias=None, grad_in_forward: bool = True,
                   use_liger: bool | None = None, num_items=None):
    """transformers' causal-LM loss from hidden states: hidden (B, S, H), labels (B, S); position
    s predicts labels[:, s + 1]; fp32 mean over tokens != -100 (NaN when there are none, as HF).
    grad_in_forward: compute gradients while the logits exist (default; see the module doc).
    use_liger: None = when on CUDA and liger_kernel imports. num_items: the divisor instead of
    the count of supervised tokens (HF's num_items_in_batch: summed NLL / num_items; several
    ranks pass all ranks' tokens / world, so a rank with none gives 0, not NaN)."""
    import torch
    import torch.nn.functional as F

    h = hidden.reshape(-1, hidden.shape[-1])            # a view: no copy of the hidden states
    # shift as HF does: pad labels by one IGNORE and drop the first, so the last position of
    # each row (which predicts nothing) is ignored and hidden needs no slicing copy
    target = F.pad(labels, (0, 1), value=IGNORE)[..., 1:].reshape(-1)
    chunk = chunk or chunk_rows(weight.shape[0])
    if use_liger is None:
        use_liger = h.is_cuda and _liger() is not None
    if use_liger and num_items is None:   # untested here (no CUDA machine in this project's checks)
        loss_fn = _liger()(ignore_index=IGNORE, reduction="mean", softcap=softcap)
        return loss_fn(weight, h, target, bias).float()
    need = [x is not None and x.requires_grad and torch.is_grad_enabled()
            for x in (h, weight, bias)]
    if not grad_in_forward or not any(need):
        lp = token_logps(h, weight, target, chunk, softcap, bias)
        return -lp.sum() / ((target != IGNORE).sum() if num_items is None else num_items)
    _, loss = _function_classes()
    h, weight, bias = _autocast(h, weight, bias)
    with torch.autocast(h.device.type, enabled=False):
        return loss.apply(h.contiguous(), weight, bias, target, chunk, softcap, *need, num_items)


def row_logps(hidden, weight, labels, chunk: int | None = None, softcap: float | None = None,
              bias=None):
    """DPO's sequence log-probs: per row, the sum of log p(label) over supervised tokens, (B,)
    fp32, shifted as causal_lm_loss shifts (module.sequence_logps computed from hidden states)."""
    import torch.nn.functional as F

    target = F.pad(labels, (0, 1), value=IGNORE)[..., 1:]                 # (B, S)
    lp = token_logps(hidden.reshape(-1, hidden.shape[-1]), weight, target.reshape(-1), chunk,
                     softcap, bias)
    return lp.view(target.shape).sum(-1)


def _liger():
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    except ImportError:
        return None
    return LigerFusedLinearCrossEntropyLoss


def decoder_and_head(model):
    """(decoder, lm_head Linear, soft-cap or None) of a transformers CausalLM, PEFT-wrapped or
    not. Raises ConfigError when LoRA targets the head itself (its weight alone is not the head)."""
    from mens.errors import ConfigError

    decoder, head = model.get_decoder(), model.get_output_embeddings()
    if hasattr(head, "base_layer") or not hasattr(head, "weight"):
        raise ConfigError("chunked cross-entropy needs a plain lm_head, but LoRA wraps it: remove "
                          "lm_head from `lane.lora.targets`.", key="lane.lora.targets")
    config = model.config
    return decoder, head, getattr(config, "final_logit_softcapping", None)


def hidden_and_head(model, batch: dict):
    """(last hidden states (B, S, H), head weight (V, H), head bias or None, soft-cap) for a batch
    — the model's forward without the lm_head: the decoder gets every key but `labels`."""
    decoder, head, softcap = decoder_and_head(model)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    if _fsdp2(model):
        # Under FSDP2 the head (tied to the embeddings) belongs to the root unit, whose weights
        # are gathered only by the root's own forward: the decoder alone would meet sharded
        # embeddings, and lm_head.weight read afterwards would be a shard. So the root runs,
        # with no logits (an empty index list to keep) and the final hidden states; the root
        # stays gathered after its forward (FSDP2 does not reshard the root until backward),
        # so head.weight is then the whole (V, H) weight and its gradient reaches the shards.
        import torch

        out = model(**inputs, output_hidden_states=True,
                    logits_to_keep=torch.zeros(0, dtype=torch.long, device=batch["input_ids"].device))
        return out.hidden_states[-1], head.weight, getattr(head, "bias", None), softcap
    hidden = decoder(**inputs).last_hidden_state
    return hidden, head.weight, getattr(head, "bias", None), softcap


def _fsdp2(model) -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return False
    return isinstance(model, FSDPModule)
