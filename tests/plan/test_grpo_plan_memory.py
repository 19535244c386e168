"""GRPO's planned memory terms (mens.plan.rl) against a real model's: a tiny Qwen3ForCausalLM
(random weights, built here) runs mens's own sampling (transformers' generate) and log-prob pass
(mens.objective.sampling.completion_logps, then the reference's under no_grad as Grpo.step does,
then backward), and torch's profiler measures the bytes allocated (its `[memory]` events, summed
in time order: the peak of live CPU allocations). Planning imports no torch; this test does.

Tolerances, and why: the KV cache is exact (tensor sizes); the head's terms are compared as the
difference between two vocabularies (the body is the same model, so what changes with V is the
head alone) within 3 %; the generation phase as a whole within 15 % (its prefill term models one
decoder layer's transients by their largest tensors, not the allocator's order).
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mens.plan import rl  # noqa: E402
from mens.plan.memory import Arch, load_contract  # noqa: E402

H, I, L, A, KV, D = 256, 768, 4, 4, 2, 64        # the tiny rung's widths (conf/rung/tiny.yaml)
FP32_COPIES = load_contract()["model"]["logits_fp32_copies"]


def arch(vocab: int) -> Arch:
    return Arch(H, I, L, A, KV, D, vocab, True)


def model(vocab: int, dtype):
    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(vocab_size=vocab, hidden_size=H, intermediate_size=I,
                                   num_hidden_layers=L, num_attention_heads=A,
                                   num_key_value_heads=KV, head_dim=D, tie_word_embeddings=True,
                                   attn_implementation="sdpa")
    return transformers.Qwen3ForCausalLM(cfg).to(dtype)


def peak_bytes(fn) -> tuple[int, object]:
    """(the peak of live CPU allocations while fn runs, above what was live before, fn())"""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return peak, out


def rollout(m, vocab: int, B: int, G: int, P: int, T: int):
    """mens's sampling call (left padding, G per prompt, every completion run to T tokens)."""
    ids = torch.randint(3, vocab, (B, P))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0                                    # one left-padded prompt
    cfg = transformers.GenerationConfig(max_new_tokens=T, min_new_tokens=T, do_sample=True,
                                        num_return_sequences=G, top_k=0, eos_token_id=None,
                                        pad_token_id=0)
    m.eval()
    with torch.no_grad():
        return m.generate(input_ids=ids, attention_mask=mask, generation_config=cfg,
                          return_dict_in_generate=True)


@pytest.mark.parametrize("dtype,wb,P", [(torch.float32, 4, 64), (torch.bfloat16, 2, 256)])
def test_generation_phase(dtype, wb, P):
    """The KV cache generate keeps, exactly; and the whole generation phase (KV cache + its
    growth + one prefill layer + the sampling logits) against generate's measured peak within
    15 %, at a short and a long prompt (attention scores as the contract says CPU's sdpa keeps
    them)."""
    B, G, T, V = 2, 4, 16, 4096
    m = model(V, dtype)
    measured, out = peak_bytes(lambda: rollout(m, V, B, G, P, T))
    kept = sum(layer.keys.nbytes + layer.values.nbytes for layer in out.past_key_values.layers)
    assert kept == rl.kv_cache_bytes(arch(V), B * G, P + T, wb)
    scores = load_contract()["model"]["attn_scores_materialised"]["cpu"]
    planned = sum(rl.generation_bytes(arch(V), B * G, P + T, T, wb, scores).values())
    assert abs(planned - measured) / measured < 0.15, (planned, measured)


def frozen(vocab: int, dtype):
    """A frozen base where only the final norm trains: no (V, h) weight gradient, which a LoRA
    run never makes either."""
    m = model(vocab, dtype)
    for p in m.parameters():
        p.requires_grad_(False)
    m.model.norm.weight.requires_grad_(True)
    return m.train()


def inputs(vocab: int, N: int, S: int, T: int):
    ids = torch.randint(3, vocab, (N, S))
    return ids, torch.ones_like(ids), torch.ones(N, T, dtype=torch.long)


def logprob_step(vocab: int, dtype, N: int, S: int, T: int, reference: bool) -> int:
    """Grpo.step's order after sampling: the policy's log-probs (kept for backward), the
    reference's under no_grad (the same model here: an adapter disabled costs no weights), then
    backward; the peak of that."""
    from mens.objective.sampling import completion_logps

    m, (ids, mask, cmask) = frozen(vocab, dtype), inputs(vocab, N, S, T)

    def step():
        logps = completion_logps(m, ids, mask, cmask)
        if reference:
            with torch.no_grad():
                completion_logps(m, ids, mask, cmask)
        logps.sum().backward()
    return peak_bytes(step)[0]


N_, S_, T_ = 4, 64, 32
SMALL, BIG = 4096, 16384


def per_value(measured_big: int, measured_small: int) -> float:
    """Measured bytes per head value (row × position × vocabulary entry): the difference
    between the two vocabularies over the difference of their head's values."""
    return (measured_big - measured_small) / (N_ * T_ * (BIG - SMALL))


@pytest.mark.parametrize("reference", [False, True])
def test_logprob_head_terms_match_the_measured_head(reference):
    """logits + reference_logits (the planner's head terms) grow with the vocabulary as the
    measured peak of the log-prob pass does, V 8,192 → 32,768 (the body alike), at fp32 — the
    precision a CPU plan trains in (hw=cpu: bf16 false)."""
    measured = logprob_step(BIG, torch.float32, N_, S_, T_, reference) - \
        logprob_step(SMALL, torch.float32, N_, S_, T_, reference)

    def planned(v):
        return sum(rl.logprob_bytes(arch(v), N_, T_, 4, FP32_COPIES, reference).values())
    want = planned(BIG) - planned(SMALL)
    assert abs(want - measured) / measured < 0.03, (want, measured)
    # at fp32 the reference's forward (8 B per value) beside the kept 4 B is backward's 12
    assert rl.logprob_bytes(arch(BIG), N_, T_, 4, FP32_COPIES, reference)["reference_logits"] == 0


def test_16_bit_head_phases():
    """bf16: the phases the plan counts, each measured — the policy's pass keeps 4 B per value
    (fp32 log-probs), backward adds 8 (their gradient and log_softmax's input gradient), and the
    ops after the lm_head (÷ temperature in bf16, .float(), log_softmax) peak at 10: a reference
    pass beside the kept 4 is 14, above backward's 12 — reference_logits is that 2. (CPU's
    bf16 lm_head matmul itself allocates ~12.5 B per value while it runs — oneDNN's fp32
    buffers; measured, a CPU-kernel transient a CUDA GEMM does not have, and CPU plans train in
    fp32: not planned.)"""
    from mens.objective.sampling import completion_logps

    out = {}
    for v in (SMALL, BIG):
        m, (ids, mask, cmask) = frozen(v, torch.bfloat16), inputs(v, N_, S_, T_)
        with torch.no_grad():
            hidden = m.model(input_ids=ids, attention_mask=mask).last_hidden_state
            logits = m.lm_head(hidden[:, -T_ - 1:])
            after_head = peak_bytes(lambda: torch.log_softmax(
                (logits[:, :-1, :] / 1.0).float(), dim=-1))[0] + logits.nbytes
        del logits
        box = {}

        def forward():
            box["lp"] = completion_logps(m, ids, mask, cmask)
        live_after_forward = live_bytes(forward)
        backward = peak_bytes(lambda: box["lp"].sum().backward())[0]
        out[v] = (after_head, live_after_forward, backward)
    per = rl.logprob_bytes_per_value(2, FP32_COPIES)
    forward, kept, back = (per_value(out[BIG][j], out[SMALL][j]) for j in range(3))
    assert abs(forward - per["forward"]) < 0.3, forward
    assert abs(kept - per["kept"]) < 0.3, kept
    # backward's tensors are fp32 whatever the compute dtype (the fp32 test pins them); at bf16
    # on CPU the lm_head's backward adds oneDNN's buffers again (measured ~0.5 B per value)
    assert back >= per["backward"] - per["kept"] - 0.3, back
    n = N_ * T_ * BIG
    assert rl.logprob_bytes(arch(BIG), N_, T_, 2, FP32_COPIES, True)["reference_logits"] == \
        n * (per["kept"] + per["forward"] - per["backward"]) == 2 * n


def live_bytes(fn) -> int:
    """What fn leaves allocated (what it stored stays alive with its graph)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    return sum(e.nbytes() for e in events)


def test_generation_server_moves_the_phase_out_of_training():
    """lane.grpo.generation=server (read with a default of local: a lane without the key
    generates locally): the training process plans no generation phase; a server on this device
    is its own base weights, its 16-bit adapter and the same generation phase, held all run."""
    from dataclasses import replace

    from mens.plan.memory import LaneModel, Shape, components

    # Qwen3-0.6B's widths with full multi-head attention (16 KV heads): a KV cache large enough
    # to outgrow the step's transients under checkpointing
    a = Arch(1024, 3072, 28, 16, 16, 128, 151936, True)
    local = LaneModel("lora", "bf16", objective="grpo", rows_per_record=8, reference=True,
                      generation_tokens=64)
    # long prompts, short answers, checkpointing: the KV cache outgrows the step's transients
    shape = Shape(4096, 2, True, False)
    contract = load_contract()
    here = components(a, local, shape, "cuda", contract)
    there = components(a, replace(local, generation_where="server"), shape, "cuda", contract)
    gen = rl.generation_bytes(a, 16, 4096, 64, 2, scores=False)
    assert here["generation"] > 0 and "server" not in here   # KV cache above the ckpt transients
    assert there["generation"] == 0
    trainable = a.lora_params(local.lora_r, local.lora_targets)
    served = rl.server_generation_bytes(a, 16, 4096, 64, 2, scores=False)
    assert there["server"] == a.params()["total"] * 2 + trainable * 2 + sum(served.values())
    # the server keeps one step's (rows × vocab) logits and each sampled token's log-prob, not
    # every step's scores (issue #49: mens.serve.batch.StepLogprobs): the same KV cache, three
    # more fp32 (rows × vocab) — the step before's, the temperature's two copies — and 12 B per
    # row and token
    assert served["kv_cache"] == gen["kv_cache"]
    assert served["sampling_logits"] - gen["sampling_logits"] == 16 * a.vocab * 4 * 3
    assert served["token_logprobs"] == 16 * 64 * 12 < 16 * 64 * a.vocab * 4 / 1000
    assert rl.generation_where({}) == "local" and rl.generation_where({"generation": "server"}) \
        == "server"
