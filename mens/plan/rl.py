"""What an objective that samples in its step (grpo) costs in memory beyond SFT's rows, term by
term, each from the code that allocates it: mens.objective.sampling.generate (HF generate) and
completion_logps, mens.objective.grpo.Grpo.step / reference. Pure arithmetic, no torch; the
terms are pinned against a real tiny model's generate and log-prob pass measured with torch's
profiler in tests/plan/test_grpo_plan_memory.py.

Shapes (per device): N = micro_batch × G rows in a training pass (G = grpo.num_generations);
T = max_completion_length; P = seq_len − T, the prompt (cut to fit); V the vocabulary; L layers,
kv KV heads of head_dim d; wb the compute dtype's bytes.

The window: Grpo samples every micro-batch of an optimizer step at its first one (W = micro_batch
× grad_accum prompts, W·G rows), in `generate` calls (or server requests) of at most
lane.grpo.generation_batch_size rows each — `calls` is that one rule, read by the objective
(mens.objective.grpo.Grpo.open_window) and by the planner, which sizes the generation phase for
one call's rows (R), not for the micro-batch's, and times sampling and the oracle per window.

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


def calls(prompts: int, rows: int | None, G: int) -> list[int]:
    """The prompts of each `generate` call (or server request) that samples a window of
    `prompts` prompts, in order: at most `rows` rows each (lane.grpo.generation_batch_size, a
    multiple of G: a prompt's group is sampled in one call), the last call the rest. rows
    None or 0: the whole window in one call (a spec from a mens before the key)."""
    per = max(1, int(rows) // G) if rows else max(prompts, 1)
    return [min(per, prompts - i) for i in range(0, prompts, per)]


def asked_rows(section) -> int:
    """lane.grpo.generation_batch_size as set (0: null, the planner picks; a section without
    the key, a spec from a mens before it: 0), checked against the group (check_rows)."""
    get = section.get if isinstance(section, Mapping) else \
        (lambda k, d=None: getattr(section, k, d))
    try:
        rows = get("generation_batch_size", None)
    except Exception:   # noqa: BLE001 — a struct config without the key
        rows = None
    check_rows(rows, int(get("num_generations", 1)))
    return int(rows or 0)


# `mens serve`'s cap on one request's rows (prompts × n: mens.serve.batch.MAX_ROWS, which
# imports transformers; pinned equal by tests/plan/test_grpo_window.py)
SERVE_MAX_ROWS = 256


def server_caps(section) -> tuple[int, int]:
    """(the most rows × (prompt + answer) tokens, the most rows) one request may ask of the
    rollout server (serve.max_batch_tokens, SERVE_MAX_ROWS; 0: unknown). The server a run
    starts itself (mens.objective.rollout_server: `mens serve` with no serve.* override but its
    address) has the schema's defaults; a server of the user's (server_url) has limits of its
    own, not known here."""
    from mens.config.publish import ServeConfig

    if generation_where(section) != "server":
        return 0, 0
    get = section.get if isinstance(section, Mapping) else \
        (lambda k, d=None: getattr(section, k, d))
    if get("server_url", None):
        return 0, 0
    return int(ServeConfig().max_batch_tokens), SERVE_MAX_ROWS


def check_rows(rows, G: int) -> None:
    """lane.grpo.generation_batch_size as asked: a multiple of the group (exit 2 else)."""
    from mens.errors import ConfigError

    if rows is not None and (int(rows) < G or int(rows) % G):
        fix = max(G, int(rows) // G * G)
        raise ConfigError(
            f"lane.grpo.generation_batch_size={rows} is not a multiple of "
            f"lane.grpo.num_generations={G}: a prompt's {G} completions are sampled in one "
            f"generate call. Use lane.grpo.generation_batch_size={fix} (or null: the planner "
            f"picks the largest that fits).", key="lane.grpo.generation_batch_size")


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


def generation_rows(peak, budget: int, micro: int, accum: int, G: int, seq_len: int,
                    asked: int = 0, cap: int = 0, max_rows: int = 0) -> tuple[int, str, str]:
    """(rows of one generate call, why, blocked) for a window of micro × accum prompts: `asked`
    (lane.grpo.generation_batch_size; at most the window's rows), or — 0 — the largest multiple
    of G from one micro-batch's rows to the window's whose peak(rows) fits `budget` and whose
    requests a rollout server admits (`cap`: serve.max_batch_tokens, rows × seq_len tokens;
    `max_rows`: rows; 0: no limit). blocked: why those rows cannot be asked whatever the memory,
    else ""."""
    window, S = micro * accum, seq_len
    if max_rows:          # the row cap as a token cap at this seq_len: one test below
        cap = min(cap or max_rows * S, max_rows * S)

    def gb(n: int) -> str:
        return f"{n / 2**30:.2f} GiB"
    if asked:
        k = min(asked // G, window)
        why = f"lane.grpo.generation_batch_size={asked} (as asked)" + (
            f", at most the window's {window * G} rows" if k < asked // G else "")
        over = (f"a request of {k * G} rows × {S} tokens is over what the rollout server "
                f"admits ({cap // S} rows: serve.max_batch_tokens, at most {max_rows or '∞'} "
                f"rows)") if cap and k * G * S > cap else ""
        return k * G, why, over
    hi = window if not cap else min(window, cap // (G * S))
    if hi < micro:                      # not even one micro-batch's groups per request
        return micro * G, f"one micro-batch's {micro * G} rows", (
            f"the rollout server admits {cap // S} rows of {S} tokens per request "
            f"(serve.max_batch_tokens, at most {max_rows or '∞'} rows), fewer than one "
            f"micro-batch's {micro * G} (micro_batch {micro} × G {G})")
    lo = micro
    if peak(lo * G) > budget:
        return lo * G, f"one micro-batch's {lo * G} rows per call, the fewest", ""
    most, whole = hi * G, peak(hi * G)
    if whole <= budget:
        lo = hi
    while hi - lo > 1:                  # the largest that fits: peaks grow with the rows
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if peak(mid * G) <= budget else (lo, mid)
    n = -(-window // lo)
    lo = -(-window // n)                # the same calls, evened out (peaks grow with the rows)
    if lo == window:
        why = (f"the whole window's {window * G} rows (micro_batch {micro} × grad_accum "
               f"{accum} × G {G}) in one call: it fits")
    elif cap and lo == cap // (G * S):
        why = (f"the window's {window * G} rows in {n} requests of ≤ {lo * G}: the rollout "
               f"server admits {cap // S} rows of {S} tokens (serve.max_batch_tokens, at most "
               f"{max_rows or '∞'} rows)")
    else:
        why = (f"the window's {window * G} rows in {n} calls of ≤ {lo * G}, the largest call "
               f"that fits ({most} rows in one call would peak at {gb(whole)})")
    return lo * G, why, ""


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
    """The generation phase's peak, by term: the KV cache of rows × (P + T) tokens and the
    cache's growth (torch.cat makes each layer's K, then V, anew: one tensor of the full length
    beside the old) at the last step; `prefill`: what the prefill — the prompts' cache and one
    layer's transients, at the first step — holds above that (0 where the answers' cache
    outgrows it: the two never coincide); and the sampling logits, every step's."""
    kv = kv_cache_bytes(arch, rows, seq_len, wb)
    growth = kv // (2 * arch.layers)
    prompt = max(seq_len - completion, 1)
    first = kv_cache_bytes(arch, rows, prompt + 1, wb) + \
        prefill_bytes(arch, rows, prompt, wb, scores)
    return {"kv_cache": kv, "kv_growth": growth, "prefill": max(0, first - kv - growth),
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


def server_generation_bytes(arch, rows: int, seq_len: int, completion: int, wb: int,
                            scores: bool, top: int = 0) -> dict[str, int]:
    """What `mens serve` holds answering one request of `rows` rows (mens.serve.batch): the
    same KV cache, growth and prefill as in-process generate; one decode step's (rows, V)
    tensors, never every step's (StepLogprobs) — the compute dtype's logits, generate's fp32
    copy, the step before's kept until its token is known, the temperature's two copies (serve's
    and transformers' warpers: none at temperature 1, counted all the same) and the sampling
    softmax; and per row and token the sampled token's log-prob and its `top` alternatives
    (value fp32 + id int64)."""
    gen = generation_bytes(arch, rows, seq_len, completion, wb, scores)
    gen["sampling_logits"] = rows * arch.vocab * (wb + 4 * 5)
    gen["token_logprobs"] = rows * completion * (1 + top) * (4 + 8)
    return gen


def server_bytes(weights: int, trainable: int, generation: Mapping[str, int]) -> int:
    """generation=server with the server on the training device (`mens serve` started by the
    run): its own copy of the base and of the adapter it loads after each step (16-bit), and one
    request's generation (server_generation_bytes) — held beside training for the whole run,
    not before the step."""
    return int(weights + trainable * 2 + sum(generation.values()))


def window_rows(micro_batch: int, grad_accum: int, G: int) -> int:
    """Rows the objective samples per optimizer step on one device: its whole window's."""
    return micro_batch * grad_accum * G


def breakdown(arch, lane, micro_batch: int, seq_len: int, comps: Mapping[str, int],
              fp32_copies: int, scores: bool, wb: int, generation_rows: int | None = None,
              grad_accum: int = 1, why: str = "", blocked: str = "") -> dict:
    """plan.json's `sampling` and the printed plan's lines: every term of a sampling step's
    memory with its formula, by phase, and which phase sets the peak. generation_rows: the rows
    of one generate call (lane.grpo.generation_batch_size as planned; None: one micro-batch's),
    `why` the planner's reason for it, `blocked` why a server cannot take its requests."""
    G, T = lane.rows_per_record, lane.generation_tokens
    N, P = micro_batch * G, seq_len - T
    R = generation_rows or N
    window = window_rows(micro_batch, grad_accum, G)
    n_calls = len(calls(window // G, R, G))
    where = lane.generation_where
    gen = (server_generation_bytes if where == "server" else generation_bytes)(
        arch, R, seq_len, T, wb, scores)
    head = logprob_bytes(arch, N, T, wb, fp32_copies, lane.reference)
    per = logprob_bytes_per_value(wb, fp32_copies)
    training = sum(comps.get(k, 0) for k in ("activations", "large_activations", "checkpoints",
                                             "logits", "packing_mask", "reference_logits"))
    ref = ("none (grpo.beta = 0)" if not lane.reference else
           "a frozen copy of the model (full, or from train.init_adapter): reference_copy"
           if lane.reference_copy else "the base with the adapter disabled: no extra weights")
    return {
        "rows": N, "group": G, "prompt_tokens": P, "completion_tokens": T,
        "generation": where, "window_rows": window, "generation_rows": R,
        "generation_calls": n_calls, "generation_why": why, "generation_blocked": blocked,
        "generation_bytes": gen, "generation_peak_bytes": sum(gen.values()),
        "training_transients_bytes": training,
        "generation_sets_peak": where == "local" and sum(gen.values()) > training,
        "logprob": {"logits_bytes": head["logits"],
                    "reference_logits_bytes": head["reference_logits"],
                    "bytes_per_value": per},
        "reference": ref, "reference_copy_bytes": comps.get("reference_copy", 0),
        "server_bytes": comps.get("server", 0),
        "formulas": {
            "kv_cache": f"{R} rows × ({P} + {T} − 1) tokens × {arch.layers} layers × K,V × "
                        f"{arch.kv_heads} kv heads × {arch.head_dim} × {wb} B",
            "logits": f"{N} rows × {T} positions × {arch.vocab:,} vocab × "
                      f"{per['backward']} B (saved fp32 log-probs + their gradient + "
                      f"log_softmax's input gradient)",
            "reference_logits": f"the reference's forward ({per['forward']} B per value) beside "
                                f"the policy's kept {per['kept']} B, above backward's "
                                f"{per['backward']} B" if lane.reference else "no reference",
        },
    }
