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
answer's ids and log-probs (it was sampled), not of its text. They are read per step (StepLogprobs)
and only when asked: a step's vocabulary is gone once its token's log-prob (and the top k) is
kept, so a request holds one (rows × vocab) step, never (rows × tokens × vocab) (issue #49: 64
rows × 1,024 tokens of a 152k vocabulary were ~150 GiB of scores). A token top-p took out of the
distribution has log-prob −inf, which JSON cannot say: it is reported as −9999.0, the floor
vLLM's OpenAI server clamps its log-probs to (`max(logprob, -9999.0)`, chat and completions).

What one request may hold is bounded before any model work (`check_size`, a 400 naming
`serve.max_batch_tokens`): its rows × (longest prompt + max_tokens) — the tokens the KV cache
holds at once, every row left-padded to the longest prompt.

Runs on the model thread only (`Slots.run`), like mens.serve.generate; a client that leaves
ends the generation at the next step (RowStops), as a streamed one's does.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from transformers import LogitsProcessor, StoppingCriteria

from mens.serve.api_error import APIError

MAX_ROWS = 256          # prompts × n per request: one batch must fit beside the model
FLOOR = -9999.0         # vLLM's floor for a log-prob (−inf is not JSON)


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

    def __init__(self, tokenizer, stop: tuple[str, ...], width: int, rows: int,
                 cancelled=None):
        self.tok, self.stop, self.width = tokenizer, stop, width
        self.cancelled = cancelled or (lambda: False)   # the client left: every row is done
        self.cut: list[int | None] = [None] * rows          # generated tokens kept per row

    def __call__(self, input_ids, scores, **kwargs):
        import torch
        if self.cancelled():
            return torch.ones(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        if self.stop:
            for r in range(input_ids.shape[0]):
                if self.cut[r] is None:
                    text = self.tok.decode(input_ids[r, self.width:].tolist(),
                                           skip_special_tokens=True)
                    if any(s in text for s in self.stop):
                        self.cut[r] = input_ids.shape[1] - self.width
        return torch.tensor([c is not None for c in self.cut], device=input_ids.device)


class StepLogprobs(LogitsProcessor):
    """Each step's log-probs of the distribution its token is drawn from, kept for that token
    (and the top k) only: one step's (rows × vocab) at a time, whatever the length.

    It must see the scores after the sampling warpers (temperature, top-p), but transformers
    appends its own warpers after the processors a caller passes. So when log-probs are asked,
    `warped` passes transformers' very warpers, in transformers' order and on its conditions,
    as the caller's processors, followed by this one, and the generation config asks none
    itself: the same scores, the same draws, read once (a second top-p sort of a 152k
    vocabulary per step would double a sampled request's time). A step's token is known only
    at the next step (the last column of input_ids) or, for the last, from the sequences
    (`finish`): until then that step's scores and their logsumexp wait here."""

    def __init__(self, top: int):
        self.top = top
        self.chosen: list = []       # per step: (N,) the log-prob of the token it drew
        self.tops: list = []         # per step: ((N, k) log-probs, (N, k) ids)
        self._last = None            # (processed scores (N, V), their logsumexp (N,))

    def __call__(self, input_ids, scores):
        self._take(input_ids[:, -1])
        lse = scores.logsumexp(-1)                                               # (N,)
        if self.top:
            v, i = scores.topk(self.top, dim=-1)
            self.tops.append((v - lse[:, None], i))
        self._last = (scores, lse)
        return scores

    def _take(self, tokens) -> None:
        if self._last is not None:
            x, lse = self._last
            self.chosen.append(x.gather(-1, tokens[:, None])[:, 0] - lse)
            self._last = None

    def warped(self, sample: bool, temperature: float, top_p: float) -> list:
        """transformers' sampling warpers for this request (GenerationMixin._get_logits_processor:
        temperature unless 1, then top-p below 1; top_k is 0, no others are set), then self."""
        from transformers import TemperatureLogitsWarper, TopPLogitsWarper

        out = []
        if sample and temperature != 1.0:
            out.append(TemperatureLogitsWarper(temperature))
        if sample and top_p < 1.0:
            out.append(TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=1))
        return out + [self]

    def finish(self, new):
        """new: (N, T) the generated ids → (N, T) log-probs, and the top k ((N, T, k) log-probs,
        (N, T, k) ids) or None. Steps past T (a stop check that ran one step ahead, then undid
        it) are dropped."""
        import torch

        T = new.shape[1]
        if len(self.chosen) < T:
            self._take(new[:, len(self.chosen)])
        self._last = None
        lp = torch.stack(self.chosen[:T], dim=1) if T else new.new_zeros(new.shape, dtype=torch.float)
        if not (self.top and T):
            return lp, None
        return lp, (torch.stack([v for v, _ in self.tops[:T]], 1),
                    torch.stack([i for _, i in self.tops[:T]], 1))


def generate_batch(slots, slot, prompts: list[list[int]], n: int, max_tokens: int,
                   temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None,
                   stop: tuple[str, ...] = (), top_logprobs: int = 0, forced: int = 0,
                   logprobs: bool = True, cancelled=None) -> list[Choice]:
    """len(prompts) × n choices (model thread). forced: the last `forced` ids of a single
    prompt open the answer (mens.serve.chat): fed as input, part of the text, not of the ids.
    logprobs: read each token's (and the top_logprobs) log-probs; cancelled: polled each step,
    True ends every row (the client left)."""
    import torch
    from transformers import LogitsProcessorList, StoppingCriteriaList

    from mens.model import generate as gen

    sample = gen.samples(temperature)
    if sample:
        torch.manual_seed(seed if seed is not None else torch.seed())
    steps = StepLogprobs(top_logprobs) if logprobs else None
    # with log-probs the warpers run as our processors, before StepLogprobs (see there)
    config = gen.generation_config(max_tokens, slots.eos, slots.pad, sample=sample,
                                   temperature=1.0 if steps else temperature,
                                   top_p=1.0 if steps else top_p, n=n)
    ids, mask = gen.left_pad(prompts, slots.pad, slots.device)                  # (B, P)
    width = ids.shape[1]
    stops = RowStops(slots.tokenizer, stop, width, len(prompts) * n, cancelled)
    procs = steps.warped(sample, temperature, top_p) if steps else []
    with torch.inference_mode(), slots.activate(slot):
        out = gen.generate(slots.model, ids, mask, config,
                           stopping_criteria=StoppingCriteriaList([stops]),
                           logits_processor=LogitsProcessorList(procs))
        seqs = out[:, width:]                                                    # (N, T)
        lp, tops = steps.finish(seqs) if steps else (None, None)
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
        lps = lp[r, :keep].tolist() if lp is not None else []
        top = ([list(zip(i, v)) for i, v in zip(tops[1][r, :keep].tolist(),
                                                tops[0][r, :keep].tolist())]
               if tops is not None else [])
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
            tops.append({"token": tt, "logprob": max(v, FLOOR), "bytes": tb})
        out.append({"token": text, "logprob": max(lp, FLOOR), "bytes": raw, "top_logprobs": tops})
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


def check_size(req, rows: int, n: int, prompt: int, max_tokens: int, limit: int) -> None:
    """A 400 before any model work when rows × n × (longest prompt + max_tokens) — the tokens the
    KV cache would hold at once — is over serve.max_batch_tokens."""
    total = rows * n * (prompt + max_tokens)
    if total <= limit:
        return
    key = "max_completion_tokens" if getattr(req, "max_completion_tokens", None) is not None \
        else "max_tokens"
    raise APIError(400, f"{key}: this request asks {rows * n} rows (prompts × n) × ({prompt} "
                        f"prompt + {max_tokens} answer tokens) = {total} tokens at once, over "
                        f"this server's limit serve.max_batch_tokens={limit} (what one request's "
                        f"KV cache may hold beside the model): ask for fewer choices (n), prompts "
                        f"or {key}, or start the server with a larger serve.max_batch_tokens.",
                   key, "batch_too_large")


def head(req, slot, chat: bool) -> dict:
    return {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
            "created": int(time.time()), "model": req.model,
            "system_fingerprint": f"mens-{slot.name}"}


async def respond(slots, slot, prompts: list[list[int]], gen, n: int, admission, head: dict,
                  chat: bool, reader=None, logprobs: bool = False, top: int = 0,
                  token_ids: bool = False, prompt_top: int | None = None,
                  request=None) -> dict:
    """The whole (non-streamed) answer of a batched request: len(prompts) × n choices from one
    generate_batch call on the model thread, in OpenAI's response shape. gen: the request's
    GenRequest (max_tokens, sampling, stop, forced opening). prompt_top: vLLM's
    prompt_logprobs (mens.serve.score), scored in the same turn on the model thread.
    request: the HTTP request, watched for its client leaving (mens.serve.generate.outcome)."""
    import threading

    from mens.serve.generate import outcome

    cancel = threading.Event()

    def work():
        from mens.serve.score import prompt_logprobs
        choices = generate_batch(slots, slot, prompts, n, gen.max_tokens, gen.temperature,
                                 gen.top_p, gen.seed, gen.stop, top, gen.forced, logprobs,
                                 cancel.is_set)
        return choices, (None if prompt_top is None else
                         prompt_logprobs(slots, slot, prompts, prompt_top))

    place = admission.enter()        # QueueFull → 503, as every request
    try:
        fut = slots.run(work)
        place.run_by(fut)
    finally:
        place.abandon()
    choices, scored = await outcome(fut, request, cancel)
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
