"""Generation's one owner: prompt ids → continuations with transformers' `generate`, as eval
(mens.eval.indomain), serve (mens.serve.generate, mens.serve.batch) and the objectives that
sample (mens.objective.sampling: GRPO, distill) all run it.

What they share lives here: which tokens end an answer, when a temperature means greedy, the
generation config (no top-k, the end and pad ids), left padding, and the call itself. What
each keeps for itself stays with it: serve's streaming, stop strings and slots (the adapter
on/off), GRPO's groups, masks and log-probs, eval's batching by room; and how each seeds, since
their contracts differ (a request's seed, a batch's seed, the objective's own generator).
"""
from __future__ import annotations

# Below this a temperature divides the logits into inf/nan (sampling would fail): greedy, as
# vLLM does.
GREEDY_BELOW = 1e-5


def samples(temperature: float) -> bool:
    """Whether `temperature` samples (else: greedy, one answer per prompt)."""
    return temperature >= GREEDY_BELOW


def end_ids(model, tokenizer) -> list[int]:
    """The tokens that end an answer: the generation config's eos ids, plus the tokenizer's."""
    gen = getattr(model, "generation_config", None)
    eos = gen.eos_token_id if gen is not None and gen.eos_token_id is not None else []
    eos = [eos] if isinstance(eos, int) else list(eos)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
        eos.append(tokenizer.eos_token_id)
    return eos


def first_end(ids: list[int], eos) -> int | None:
    """Where the first end token of a generated row stands (None: it has none)."""
    return next((k for k, t in enumerate(ids) if t in eos), None)


def generation_config(max_new_tokens: int, eos: list[int], pad: int, *, sample: bool,
                      temperature: float = 1.0, top_p: float = 1.0, n: int = 1, **extra):
    """transformers' GenerationConfig for `n` answers per prompt. Sampling sets top_k=0: OpenAI's
    API has no top-k and TRL's GRPOTrainer samples without one, so neither transformers' default
    of 50 nor a model's own generation_config may apply. Greedy leaves temperature, top_p and
    top_k unset (None). extra: further fields (output_scores, return_dict_in_generate)."""
    from transformers import GenerationConfig

    return GenerationConfig(
        max_new_tokens=max_new_tokens, do_sample=sample, num_return_sequences=n,
        temperature=temperature if sample else None, top_p=top_p if sample else None,
        top_k=0 if sample else None, eos_token_id=eos, pad_token_id=pad, **extra)


def left_pad(rows: list[list[int]], pad: int, device):
    """(ids, attention mask), both (B, P) long: left padding, so every row's answer starts at P."""
    import torch

    width = max(len(r) for r in rows)
    ids = [[pad] * (width - len(r)) + list(r) for r in rows]
    mask = [[0] * (width - len(r)) + [1] * len(r) for r in rows]
    return (torch.tensor(ids, dtype=torch.long, device=device),
            torch.tensor(mask, dtype=torch.long, device=device))


def generate(model, ids, mask, config, **kw):
    """`model.generate` on a left-padded batch (left_pad) under no grad: (B·n, P + T) sequences,
    or transformers' output object when the config asks for a dict (return_dict_in_generate).
    kw: streamer, stopping_criteria. The caller picks the grad mode around it too: serve and
    eval run under inference_mode; GRPO's rollouts must not (their tensors enter the training
    step's forward), so no_grad is what all three share."""
    import torch

    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, generation_config=config, **kw)
