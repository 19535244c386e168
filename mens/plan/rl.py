"""What an objective that samples in its step (grpo) costs in memory beyond SFT's rows, term by
term, each from the code that allocates it: mens.objective.sampling.generate (HF generate) and
completion_logps, mens.objective.grpo.Grpo.step / reference. Pure arithmetic, no torch; the
terms are pinned against a real tiny model's generate and log-prob pass measured with torch's
profiler in tests/plan/test_grpo_plan_memory.py.

Shapes (per device): N = micro_batch × G rows (G = grpo.num_generations); T =
max_completion_length; P = seq_len − T, the prompt (cut to fit); V the vocabulary; L layers,
kv KV heads of head_dim d; wb the compute dtype's bytes.

A grpo step runs in phases, and only one phase's transients exist at a time:
  1. generation (no grad): the KV cache, one prefill layer's transients, each decode step's
     sampling logits — before the step's own tensors exist;
  2. the policy's log-prob pass: the training activations and the head's logits;
  3. the reference's log-probs (no grad), while the policy's pass is held for backward;
  4. backward.
The planner's components are what the step's peak adds up to: phase 2-4 are the contract's
training terms (activations, logits) plus `reference_logits`; phase 1 is `generation`, counted
only where it exceeds the training transients it precedes.
"""
from __future__ import annotations

from typing import Mapping

GENERATIONS = ("local", "server")   # lane.grpo.generation (the rl-server lane key; local when absent)


def generation_where(section) -> str:
    """Where rollouts are generated: `local` (HF generate in the training process) or `server`
    (an OpenAI-compatible server: its memory is the server process's, not training's). A lane
    without the key (a mens before it, a saved spec) generates locally."""
    get = section.get if isinstance(section, Mapping) else \
        (lambda k, d=None: getattr(section, k, d))
    try:
        where = get("generation", None)
    except Exception:   # noqa: BLE001 — a struct config without the key: local
        where = None
    return str(where or "local")


def kv_cache_bytes(arch, rows: int, tokens: int, wb: int) -> int:
    """transformers' DynamicCache after generating: per layer a K and a V tensor of
    (rows, kv_heads, tokens − 1, head_dim) — the last sampled token is never fed back, so it has
    no entry (measured: tests/plan/test_grpo_plan_memory.py)."""
    # a linear-attention layer (Qwen3.5) keeps its recurrent state instead (Arch.state_bytes)
    state = getattr(arch, "state_bytes", None)
    if state is not None:
        return state(rows, max(tokens - 1, 0), wb)
    return rows * max(tokens - 1, 0) * arch.layers * 2 * arch.kv_heads * arch.head_dim * wb


def prefill_bytes(arch, rows: int, prompt: int, wb: int, scores: bool) -> int:
    """The transients of one decoder layer's forward over the prompts (no grad, nothing kept):
    the MLP's act(gate), up and their product (3 × rows·P·intermediate), or the attention's
    scores and softmax (2 × rows·heads·P², where the backend materialises them: `scores`) with
    q, k, v — whichever is larger — beside the residual stream, its norm and the layer's output
    (3 × rows·P·hidden)."""
    t = rows * prompt
    mlp = 3 * t * getattr(arch, "mlp_width", arch.intermediate)
    attn = (2 * rows * arch.heads * prompt * prompt if scores else 0) + \
        t * (arch.heads + 2 * arch.kv_heads) * arch.head_dim
    return int((max(mlp, attn) + 3 * t * arch.hidden) * wb)


def sampling_logits_bytes(arch, rows: int, wb: int) -> int:
    """Each decode step's head: the last position's logits (rows, V) in the compute dtype,
    generate's fp32 copy (its scores) and softmax's fp32 probabilities."""
    return rows * arch.vocab * (wb + 4 + 4)


def generation_bytes(arch, rows: int, seq_len: int, completion: int, wb: int,
                     scores: bool) -> dict[str, int]:
    """The generation phase's peak, by term: the KV cache of rows × (P + T) tokens, the cache's
    growth (torch.cat makes each layer's K, then V, anew: one tensor of the full length beside
    the old), one prefill layer's transients and the sampling logits."""
    kv = kv_cache_bytes(arch, rows, seq_len, wb)
    return {"kv_cache": kv, "kv_growth": kv // (2 * arch.layers),
            "prefill": prefill_bytes(arch, rows, max(seq_len - completion, 1), wb, scores),
            "sampling_logits": sampling_logits_bytes(arch, rows, wb)}


def logprob_bytes_per_value(wb: int, fp32_copies: int) -> dict[str, int]:
    """Bytes per (row, completion position, vocabulary entry) of completion_logps' head, by
    phase: `forward`: the logits (wb), their fp32 copy (none at fp32: .float() is the same
    tensor) and log_softmax's output; `kept`: that output, saved for backward; `backward`: the
    kept output, its gradient and log_softmax's input gradient (4 + 4 × fp32_copies, the
    contract's logits_fp32_copies); `reference`: the reference's forward (no grad) beside the
    policy's kept output (Grpo.step scores the reference after the policy)."""
    forward = wb + (4 if wb < 4 else 0) + 4
    return {"forward": forward, "kept": 4, "backward": 4 + 4 * fp32_copies,
            "reference": 4 + forward}


def logprob_bytes(arch, rows: int, completion: int, wb: int, fp32_copies: int,
                  reference: bool) -> dict[str, int]:
    """(logits, reference_logits): the log-prob pass's head at its peak — backward's, which
    the forward never exceeds — and what the reference's pass adds above it (0 at fp32; 2 bytes
    per value at 16 bits). Over rows × T positions: the model's logits keep T + 1
    (logits_to_keep), the last one dropped before any copy is made, and they are freed before
    the peak."""
    per = logprob_bytes_per_value(wb, fp32_copies)
    n = rows * completion * arch.vocab
    extra = max(0, per["reference"] - per["backward"]) if reference else 0
    return {"logits": n * per["backward"], "reference_logits": n * extra}


def server_bytes(weights: int, trainable: int, generation: Mapping[str, int]) -> int:
    """generation=server with the server on the training device (`mens serve` started by the
    run): its own copy of the base and of the adapter it loads after each step (16-bit), and the
    generation phase — held beside training for the whole run, not before the step."""
    return int(weights + trainable * 2 + sum(generation.values()))


def breakdown(arch, lane, micro_batch: int, seq_len: int, comps: Mapping[str, int],
              fp32_copies: int, scores: bool, wb: int) -> dict:
    """plan.json's `sampling` and the printed plan's lines: every term of a sampling step's
    memory with its formula, by phase, and which phase sets the peak."""
    G, T = lane.rows_per_record, lane.generation_tokens
    N, P = micro_batch * G, seq_len - T
    gen = generation_bytes(arch, N, seq_len, T, wb, scores)
    head = logprob_bytes(arch, N, T, wb, fp32_copies, lane.reference)
    per = logprob_bytes_per_value(wb, fp32_copies)
    training = sum(comps.get(k, 0) for k in ("activations", "large_activations", "checkpoints",
                                             "logits", "packing_mask", "reference_logits"))
    where = lane.generation_where
    ref = ("none (grpo.beta = 0)" if not lane.reference else
           "a frozen copy of the model (full, or from train.init_adapter): reference_copy"
           if lane.reference_copy else "the base with the adapter disabled: no extra weights")
    return {
        "rows": N, "group": G, "prompt_tokens": P, "completion_tokens": T,
        "generation": where,
        "generation_bytes": gen, "generation_peak_bytes": sum(gen.values()),
        "training_transients_bytes": training,
        "generation_sets_peak": where == "local" and sum(gen.values()) > training,
        "logprob": {"logits_bytes": head["logits"],
                    "reference_logits_bytes": head["reference_logits"],
                    "bytes_per_value": per},
        "reference": ref, "reference_copy_bytes": comps.get("reference_copy", 0),
        "server_bytes": comps.get("server", 0),
        "formulas": {
            "kv_cache": f"{N} rows × ({P} + {T} − 1) tokens × {arch.layers} layers × K,V × "
                        f"{arch.kv_heads} kv heads × {arch.head_dim} × {wb} B",
            "logits": f"{N} rows × {T} positions × {arch.vocab:,} vocab × "
                      f"{per['backward']} B (saved fp32 log-probs + their gradient + "
                      f"log_softmax's input gradient)",
            "reference_logits": f"the reference's forward ({per['forward']} B per value) beside "
                                f"the policy's kept {per['kept']} B, above backward's "
                                f"{per['backward']} B" if lane.reference else "no reference",
        },
    }
