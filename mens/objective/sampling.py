"""GRPO's sampling: G answers to each chat prompt from the policy as it is (transformers'
`generate`, left padding, as TRL's GRPOTrainer samples), and the per-token log-probs of those
answers under a model (the policy, the reference). Shapes as in mens.objective.grpo: B prompts,
G completions each, N = B·G rows; P prompt tokens (left-padded), T completion tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

from mens.errors import ConfigError
# which tokens end an answer is the generation helper's (serve's slots read the same)
from mens.model.generate import end_ids


@dataclass
class Rollout:
    """G sampled completions of each of B prompts, rows grouped by prompt (prompt i: rows
    i·G … i·G+G-1)."""
    prompt_ids: "torch.Tensor"         # (N, P) left-padded
    prompt_mask: "torch.Tensor"        # (N, P) 1 on prompt tokens
    completion_ids: "torch.Tensor"     # (N, T) pad after the end token
    completion_mask: "torch.Tensor"    # (N, T) 1 up to and including the end token
    texts: list[str]                   # N decoded completions, end token and padding left out
    lengths: list[int]                 # N completion lengths (tokens under the mask)
    eos: list[bool]                    # N: ended on an end token (else cut at max_new_tokens)
    group_size: int
    truncated: int = 0                 # prompts (of B) whose head was cut to max_prompt_tokens

    @property
    def input_ids(self):               # (N, P + T): what completion_logps scores
        import torch
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self):          # (N, P + T)
        import torch
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)


def concat(rolls: list) -> Rollout:
    """One Rollout of a window sampled in several calls (mens.plan.rl.calls), rows in call
    order: prompts left-padded and completions right-padded to the widest (mask 0 there, the
    id the rows already pad with); a server's rollouts (ServerRollout) keep their log-probs (0
    past the end), the reload the first call made and the calls' seconds summed."""
    import dataclasses
    import math

    import torch
    import torch.nn.functional as F

    if len(rolls) == 1:
        return rolls[0]
    first = rolls[0]

    def fill(ids, mask) -> int:   # the id a rollout pads with (0 when it pads nowhere)
        pad = ids[mask == 0]
        return int(pad[0]) if pad.numel() else 0
    P = max(r.prompt_ids.shape[1] for r in rolls)
    T = max(r.completion_ids.shape[1] for r in rolls)
    p_pad, c_pad = fill(first.prompt_ids, first.prompt_mask), \
        fill(first.completion_ids, first.completion_mask)

    def cat(name: str, width: int, left: bool, value) -> "torch.Tensor":
        return torch.cat([F.pad(getattr(r, name), (width - getattr(r, name).shape[1], 0) if left
                                else (0, width - getattr(r, name).shape[1]), value=value)
                          for r in rolls])
    out = {"prompt_ids": cat("prompt_ids", P, True, p_pad),
           "prompt_mask": cat("prompt_mask", P, True, 0),
           "completion_ids": cat("completion_ids", T, False, c_pad),
           "completion_mask": cat("completion_mask", T, False, 0),
           "texts": [t for r in rolls for t in r.texts],
           "lengths": [n for r in rolls for n in r.lengths],
           "eos": [e for r in rolls for e in r.eos],
           "truncated": sum(r.truncated for r in rolls)}
    if getattr(first, "sampling_logps", None) is not None:    # a server's (rollout_server)
        secs = [r.reload_s for r in rolls if not math.isnan(r.reload_s)]
        out.update(sampling_logps=cat("sampling_logps", T, False, 0.0),
                   reload_s=sum(secs) if secs else math.nan,
                   generate_s=sum(r.generate_s for r in rolls))
    return dataclasses.replace(first, **out)


def prompt_ids(tokenizer, messages: list[dict], encoder=None, tools=None) -> list[int]:
    """A chat prompt's ids with the generation prompt: the run's encoder (mens.data.encoder,
    the template training used) when given, else the tokenizer's own chat template. tools: the
    record's tool schemas, which the template writes into the prompt as training did."""
    text = encoder.prompt_text(messages, tools) if encoder is not None else \
        tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True,
                                      tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


def sampling_rng(seed: int, device) -> "torch.Generator":
    """A generator of the device's own kind (CPU, CUDA and MPS states differ), seeded."""
    import torch
    return torch.Generator(device=device).manual_seed(seed)


class _Stream:
    """Within: the device's default RNG holds `rng`'s state (transformers' `generate` samples
    from the default RNG and takes no generator); after: `rng` has advanced by what sampling
    drew, and the process's global RNG is as it was before (torch.random.fork_rng)."""
    def __init__(self, rng, device):
        import torch
        self.rng, self.device = rng, torch.device(device)
        kind = self.device.type
        self.fork = torch.random.fork_rng(devices=[] if kind == "cpu" else [self.device.index or 0],
                                          device_type="cuda" if kind == "cpu" else kind)
        mod = getattr(torch, kind, None)
        self.get, self.set = ((torch.get_rng_state, torch.set_rng_state) if kind == "cpu" else
                              (lambda: mod.get_rng_state(self.device),
                               lambda s: mod.set_rng_state(s, self.device)) if kind == "cuda" else
                              (mod.get_rng_state, mod.set_rng_state))

    def __enter__(self):
        self.fork.__enter__()
        self.set(self.rng.get_state())

    def __exit__(self, *exc):
        self.rng.set_state(self.get())
        return self.fork.__exit__(*exc)


def prompt_rows(tokenizer, prompts: list[list[dict]], encoder=None, tools=None,
                max_prompt_tokens: int | None = None) -> tuple[list[list[int]], int]:
    """Each prompt's ids (prompt_ids) cut to its last max_prompt_tokens, and how many were cut:
    what in-process sampling and a server's rollouts (mens.objective.rollout_server) both send."""
    rows = [prompt_ids(tokenizer, p, encoder, t)
            for p, t in zip(prompts, tools or [None] * len(prompts))]
    cut = sum(len(r) > max_prompt_tokens for r in rows) if max_prompt_tokens else 0
    if cut:
        rows = [r[-max_prompt_tokens:] for r in rows]
    return rows, cut


def generate(model, tokenizer, prompts: list[list[dict]], G: int, max_new_tokens: int,
             temperature: float = 1.0, top_p: float = 1.0, seed: int = 0,
             encoder=None, max_prompt_tokens: int | None = None, greedy: bool = False,
             tools: list | None = None, rng=None) -> Rollout:
    """G samples of each chat prompt with transformers' `generate` (left padding, no top-k, as
    TRL's GRPOTrainer samples), stopping at the end tokens; seeded. A prompt longer than
    max_prompt_tokens keeps its last tokens (TRL's max_prompt_length cuts from the left too):
    a row is then at most max_prompt_tokens + max_new_tokens, the length the planner plans.
    greedy: one argmax answer per prompt (G must be 1; the held-out measure), no sampling.
    tools: per prompt, its record's tool schemas (None: none). rng: the torch.Generator to
    sample from (the objective's, advanced by this call; sampling_rng makes one), else one
    seeded from `seed` for this call. Either way the global RNG is left as it was."""
    import contextlib

    import torch

    from mens.model import generate as gen

    if greedy and G != 1:
        raise ValueError("a greedy answer is one per prompt (G=1)")
    if G < 1 or (temperature <= 0 and not greedy):
        raise ConfigError(f"GRPO samples G ≥ 1 completions at a temperature > 0 (got G={G}, "
                          f"temperature={temperature}).", key="grpo.num_generations")
    eos = end_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    rows, cut = prompt_rows(tokenizer, prompts, encoder, tools, max_prompt_tokens)
    device = next(model.parameters()).device
    ids, mask = gen.left_pad(rows, pad, device)                              # (B, P)
    width = ids.shape[1]
    # greedy is asked for by name here (the held-out measure), not by a temperature: GRPO
    # refuses temperature ≤ 0 above rather than falling back to greedy as serve and eval do
    config = gen.generation_config(max_new_tokens, eos, pad, sample=not greedy,
                                   temperature=temperature, top_p=top_p, n=G)
    was_training = model.training
    model.eval()
    if rng is None and not greedy:
        rng = sampling_rng(seed, device)
    with contextlib.nullcontext() if greedy else _Stream(rng, device):
        seqs = gen.generate(model, ids, mask, config)
    model.train(was_training)
    completion = seqs[:, width:]                                            # (N, T)
    is_end = torch.isin(completion, torch.tensor(eos, device=device))      # (N, T)
    T = completion.shape[1]
    # the first end token of each row (T when none): the mask keeps it, as TRL's does
    first = torch.where(is_end.any(1), is_end.int().argmax(1), torch.full_like(is_end[:, 0], T,
                                                                               dtype=torch.long))
    cmask = (torch.arange(T, device=device)[None, :] <= first[:, None]).long()   # (N, T)
    completion = completion.masked_fill(cmask == 0, pad)
    lengths = cmask.sum(1).tolist()
    texts = [tokenizer.decode(row[:n - (1 if e else 0)].tolist(), skip_special_tokens=True)
             for row, n, e in zip(completion, lengths, is_end.any(1).tolist())]
    return Rollout(ids.repeat_interleave(G, 0), mask.repeat_interleave(G, 0), completion, cmask,
                   texts, lengths, is_end.any(1).tolist(), G, cut)


def completion_logps(model, input_ids, attention_mask, completion_mask, temperature: float = 1.0,
                     entropy: bool = False):
    """(N, T) log-probs of the completion tokens (the last T = completion_mask.shape[1] columns
    of input_ids) under `model`, logits divided by the sampling temperature as TRL does.
    entropy: also the (N, T) entropy of each position's distribution (no grad; TRL's
    `entropy` metric), 0 past the end."""
    import torch

    T = completion_mask.shape[1]
    # logits_to_keep=T+1: the last position's logits predict nothing in the completion
    logits = model(input_ids=input_ids, attention_mask=attention_mask,
                   logits_to_keep=T + 1).logits[:, :-1, :] / temperature   # (N, T, V)
    logps = torch.log_softmax(logits.float(), dim=-1)
    out = logps.gather(-1, input_ids[:, -T:].unsqueeze(-1)).squeeze(-1)   # (N, T)
    out = out.masked_fill(completion_mask == 0, 0.0)      # 0 past the end, as TRL's fused head
    if not entropy:
        return out
    with torch.no_grad():
        ent = -(logps.exp() * logps).sum(-1).masked_fill(completion_mask == 0, 0.0)  # (N, T)
    return out, ent
