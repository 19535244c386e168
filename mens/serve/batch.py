"""Several choices in one `generate` call: `n` answers to each of one or more prompts, with the
per-token log-probs OpenAI's `logprobs` asks for (issue #39: GRPO's rollouts through a server).

The prompts are left-padded into one batch and `num_return_sequences=n` repeats each — the very
call (mens.model.generate) that mens.objective.sampling.generate makes in the trainer, so a
server and an in-process rollout of the same weights compute the same thing (greedy: the same
tokens; seeded: the same draws). Choice k answers prompt k // n, as OpenAI and vLLM order them.

Log-probs are those of the distribution each token was drawn from: log-softmax of the scores
after transformers' logits processors (the temperature, top-p), i.e. vLLM's
`logprobs_mode=processed_logprobs`, which TRL asks of vLLM for its importance-sampling
correction; greedy (temperature 0) gives the raw model's. The end-of-turn token is part of the
answer's ids and log-probs (it was sampled), not of its text.

Runs on the model thread only (`Slots.run`), like mens.serve.generate.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from transformers import StoppingCriteria

from mens.serve.api_error import APIError

MAX_ROWS = 256          # prompts × n per request: one batch must fit beside the model


@dataclass
class Choice:
    text: str
    token_ids: list[int]                 # generated ids, the end token included
    finish_reason: str                   # "stop" | "length"
    logprobs: list[float] = field(default_factory=list)            # per token of token_ids
    top: list[list[tuple[int, float]]] = field(default_factory=list)   # per token: (id, logp)


class RowStops(StoppingCriteria):
    """Per row: done once its text holds a stop string (the row's length then is kept, so
    its ids can be cut where the stop string completed). No stop strings: never stops."""

    def __init__(self, tokenizer, stop: tuple[str, ...], width: int, rows: int):
        self.tok, self.stop, self.width = tokenizer, stop, width
        self.cut: list[int | None] = [None] * rows          # generated tokens kept per row

    def __call__(self, input_ids, scores, **kwargs):
        import torch
        if self.stop:
            for r in range(input_ids.shape[0]):
                if self.cut[r] is None:
                    text = self.tok.decode(input_ids[r, self.width:].tolist(),
                                           skip_special_tokens=True)
                    if any(s in text for s in self.stop):
                        self.cut[r] = input_ids.shape[1] - self.width
        return torch.tensor([c is not None for c in self.cut], device=input_ids.device)


def generate_batch(slots, slot, prompts: list[list[int]], n: int, max_tokens: int,
                   temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None,
                   stop: tuple[str, ...] = (), top_logprobs: int = 0, forced: int = 0) -> list[Choice]:
    """len(prompts) × n choices (model thread). forced: the last `forced` ids of a single
    prompt open the answer (mens.serve.chat): fed as input, part of the text, not of the ids."""
    import torch
    from transformers import StoppingCriteriaList

    from mens.model import generate as gen

    sample = gen.samples(temperature)
    if sample:
        torch.manual_seed(seed if seed is not None else torch.seed())
    config = gen.generation_config(max_tokens, slots.eos, slots.pad, sample=sample,
                                   temperature=temperature, top_p=top_p, n=n,
                                   output_scores=True, return_dict_in_generate=True)
    ids, mask = gen.left_pad(prompts, slots.pad, slots.device)                  # (B, P)
    width = ids.shape[1]
    stops = RowStops(slots.tokenizer, stop, width, len(prompts) * n)
    with torch.inference_mode(), slots.activate(slot):
        out = gen.generate(slots.model, ids, mask, config,
                           stopping_criteria=StoppingCriteriaList([stops]))
    seqs = out.sequences[:, width:]                                              # (N, T)
    # (N, T, V) → log-probs of the processed scores, as sampled from
    logp = torch.stack(out.scores, dim=1).float().log_softmax(-1) if out.scores else None
    opening = list(prompts[0][len(prompts[0]) - forced:]) if forced else []
    choices = []
    for r in range(seqs.shape[0]):
        row = seqs[r].tolist()
        end = gen.first_end(row, slots.eos)
        keep = len(row) if end is None else end + 1
        if stops.cut[r] is not None:
            keep = min(keep, stops.cut[r])
        toks = row[:keep]
        text = slots.tokenizer.decode(opening + toks, skip_special_tokens=True)
        hit = [i for i in (text.find(s) for s in stop) if i >= 0]
        text = text[:min(hit)] if hit else text
        reason = "stop" if end is not None or hit else ("length" if keep >= max_tokens else "stop")
        lps, top = [], []
        if logp is not None and toks:
            rows = logp[r, :len(toks)]                                           # (t, V)
            lps = rows.gather(-1, torch.tensor(toks, device=rows.device)[:, None])[:, 0].tolist()
            if top_logprobs:
                v, i = rows.topk(top_logprobs, dim=-1)
                top = [list(zip(a, b)) for a, b in zip(i.tolist(), v.tolist())]
        choices.append(Choice(text, toks, reason, lps, top))
    return choices


def token_text(tokenizer, tid: int) -> tuple[str, list[int]]:
    """A token's text and its UTF-8 bytes as OpenAI reports them: byte-level BPE pieces are
    mapped back to their raw bytes (a piece may hold half a character; its text then shows
    U+FFFD, its bytes stay exact); other tokenizers: the decoded piece."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode   # GPT-2's byte map

    global _BYTE_DECODER
    if _BYTE_DECODER is None:
        _BYTE_DECODER = {c: b for b, c in bytes_to_unicode().items()}
    piece = tokenizer.convert_ids_to_tokens(tid)
    if isinstance(piece, str) and piece and all(c in _BYTE_DECODER for c in piece):
        raw = bytes(_BYTE_DECODER[c] for c in piece)
    else:
        raw = tokenizer.decode([tid]).encode("utf-8")
    return raw.decode("utf-8", errors="replace"), list(raw)


_BYTE_DECODER: dict | None = None


def logprobs_content(tokenizer, choice: Choice) -> list[dict]:
    """OpenAI's chat shape: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]."""
    out = []
    for k, (tid, lp) in enumerate(zip(choice.token_ids, choice.logprobs)):
        text, raw = token_text(tokenizer, tid)
        tops = []
        for t, v in (choice.top[k] if choice.top else []):
            tt, tb = token_text(tokenizer, t)
            tops.append({"token": tt, "logprob": v, "bytes": tb})
        out.append({"token": text, "logprob": lp, "bytes": raw, "top_logprobs": tops})
    return out


def completion_logprobs(tokenizer, choice: Choice) -> dict:
    """/v1/completions: OpenAI's legacy fields (tokens, token_logprobs, top_logprobs,
    text_offset — what vLLM returns there) plus the chat shape under `content`."""
    content = logprobs_content(tokenizer, choice)
    offsets, at = [], 0
    for c in content:
        offsets.append(at)
        at += len(c["token"])
    return {"tokens": [c["token"] for c in content],
            "token_logprobs": [c["logprob"] for c in content],
            "top_logprobs": [{t["token"]: t["logprob"] for t in c["top_logprobs"]}
                             for c in content] if choice.top else None,
            "text_offset": offsets, "content": content}


def prompt_ids(slots, p) -> list[int]:
    """One prompt of /v1/completions (text, or token ids: used as they are) → its ids."""
    if isinstance(p, list):
        vocab = len(slots.request_tokenizer)
        if any(t < 0 or t >= vocab for t in p):
            raise APIError(400, f"prompt: token ids must be in [0, {vocab}).", "prompt")
        prompt = list(p)
    else:
        try:
            prompt = slots.encode(p)
        except Exception as e:  # e.g. a lone surrogate ("\ud800") that JSON allows
            raise APIError(400, f"prompt: it cannot be tokenized: {e}", "prompt")
    if not prompt:
        raise APIError(400, "prompt: it is empty.", "prompt")
    return prompt


def wanted(req, prompts: int) -> bool:
    """Answered by mens.serve.batch (never streamed: said, not ignored)."""
    lp = req.logprobs is not None and req.logprobs is not False   # /v1/completions: 0 asks
    scored = getattr(req, "prompt_logprobs", None) is not None       # vLLM's: 0 asks too
    wanted = (req.n or 1) > 1 or lp or scored or bool(req.return_token_ids) or prompts > 1
    if wanted and req.stream:
        raise APIError(400, "stream: n > 1, logprobs, prompt_logprobs, return_token_ids and "
                            "batches of prompts are answered whole, not streamed: send "
                            "stream=false.", "stream")
    return wanted


def head(req, slot, chat: bool) -> dict:
    return {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
            "created": int(time.time()), "model": req.model,
            "system_fingerprint": f"mens-{slot.name}"}


async def respond(slots, slot, prompts: list[list[int]], gen, n: int, admission, head: dict,
                  chat: bool, reader=None, logprobs: bool = False, top: int = 0,
                  token_ids: bool = False, prompt_top: int | None = None) -> dict:
    """The whole (non-streamed) answer of a batched request: len(prompts) × n choices from one
    generate_batch call on the model thread, in OpenAI's response shape. gen: the request's
    GenRequest (max_tokens, sampling, stop, forced opening). prompt_top: vLLM's
    prompt_logprobs (mens.serve.score), scored in the same turn on the model thread."""
    import asyncio

    def work():
        from mens.serve.score import prompt_logprobs
        choices = generate_batch(slots, slot, prompts, n, gen.max_tokens, gen.temperature,
                                 gen.top_p, gen.seed, gen.stop, top, gen.forced)
        return choices, (None if prompt_top is None else
                         prompt_logprobs(slots, slot, prompts, prompt_top))

    place = admission.enter()        # QueueFull → 503, as every request
    try:
        fut = slots.run(work)
        place.run_by(fut)
    finally:
        place.abandon()
    choices, scored = await asyncio.wrap_future(fut)
    tok, out = slots.request_tokenizer, []
    for k, c in enumerate(choices):
        if chat:
            msg, reason = reader.message(c.text, c.finish_reason) if reader else \
                ({"role": "assistant", "content": c.text}, c.finish_reason)
            item = {"index": k, "message": msg, "finish_reason": reason,
                    "logprobs": {"content": logprobs_content(tok, c)} if logprobs else None}
        else:
            item = {"index": k, "text": c.text, "finish_reason": c.finish_reason,
                    "logprobs": completion_logprobs(tok, c) if logprobs else None}
        if token_ids:
            item["token_ids"] = c.token_ids
            item["prompt_token_ids"] = list(prompts[k // n])
        if scored is not None:
            item["prompt_logprobs"] = scored[k // n]
        out.append(item)
    used = sum(len(p) for p in prompts), sum(len(c.token_ids) for c in choices)
    return {**head, "object": "chat.completion" if chat else "text_completion", "choices": out,
            "usage": {"prompt_tokens": used[0], "completion_tokens": used[1],
                      "total_tokens": sum(used)}}
