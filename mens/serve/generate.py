"""One generation on a slot: the one generation helper (mens.model.generate) plus what an
OpenAI server must add — stop strings cut out of the text, `finish_reason`, honest token
counts, and incremental text for streaming that is exactly the non-streamed text cut into
pieces.

Runs on the model thread only (`Slots.run`): it switches the PeftModel's active adapter.
`outcome` is the event loop's side of a non-streamed request: it waits for the model thread
and stops the generation once the client has left (nobody would read the answer).
"""
from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Callable

from transformers import StoppingCriteria
from transformers.generation.streamers import BaseStreamer


@dataclass(frozen=True)
class GenRequest:
    prompt_ids: tuple[int, ...]
    max_tokens: int
    temperature: float = 1.0      # 0 (below 1e-5): greedy
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    # the last `forced` prompt ids open the answer (a tool call's opening that tool_choice
    # required, mens.serve.chat): fed as input, yet part of the answer's text
    forced: int = 0


@dataclass
class GenResult:
    text: str
    token_ids: list[int]
    finish_reason: str            # "stop" (end of turn or a stop string) | "length"
    prompt_tokens: int
    completion_tokens: int        # every token the model generated, the end-of-turn one included


class Decoder(BaseStreamer, StoppingCriteria):
    """Both streamer and stopping criterion of one `generate` call.

    As a streamer it receives each new token, re-decodes the completion so far and passes on
    only text that cannot change any more: not a trailing half UTF-8 character (shown as
    U+FFFD), and not the last len(longest stop)-1 characters, which may be the start of a stop
    string. As a criterion it ends generation once a stop string appears (transformers'
    `stop_strings` would also stop there, but it keeps the stop string in the output, and the
    text would have to be cut here anyway).
    """

    def __init__(self, tokenizer, stop: tuple[str, ...], on_text: Callable[[str], None] | None,
                 cancelled: Callable[[], bool] | None, prefix: tuple[int, ...] = ()):
        self.tok, self.stop, self.on_text = tokenizer, stop, on_text
        self.cancelled = cancelled or (lambda: False)
        self.ids: list[int] = list(prefix)   # the answer's forced opening, then what is generated
        self.sent = ""
        self.cut: int | None = None   # where the first stop string starts in the text
        self._prompt_seen = False

    def text(self) -> str:
        return self.tok.decode(self.ids, skip_special_tokens=True)

    def put(self, value) -> None:
        if not self._prompt_seen:     # generate() hands the streamer the prompt first
            self._prompt_seen = True
            return
        self.ids += value.reshape(-1).tolist()
        if self.cut is not None:
            return
        text = self.text()
        hits = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        if hits:
            self.cut = min(hits)
            self._send(text[:self.cut])
            return
        safe = text.rstrip("\ufffd")
        hold = max((len(s) for s in self.stop), default=1) - 1
        self._send(safe[:len(safe) - hold] if hold else safe)

    def _send(self, safe: str) -> None:
        if self.on_text and len(safe) > len(self.sent) and safe.startswith(self.sent):
            self.on_text(safe[len(self.sent):])
            self.sent = safe

    def end(self) -> None:
        pass

    def __call__(self, input_ids, scores, **kwargs):
        import torch
        done = self.cut is not None or self.cancelled()
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)

    def finish(self) -> str:
        """The whole completion text; whatever was not streamed yet is sent now."""
        text = self.text()
        if self.cut is None:
            hits = [i for i in (text.find(s) for s in self.stop) if i >= 0]
            self.cut = min(hits) if hits else None
        final = text if self.cut is None else text[:self.cut]
        if self.on_text and final.startswith(self.sent) and len(final) > len(self.sent):
            self.on_text(final[len(self.sent):])
            self.sent = final
        return final


def generate(slots, slot, req: GenRequest, on_text: Callable[[str], None] | None = None,
             cancelled: Callable[[], bool] | None = None) -> GenResult:
    """Generate on `slot` (model thread). on_text gets each piece of text once it is final."""
    import torch
    from transformers import StoppingCriteriaList

    from mens.model import generate as gen

    sample = gen.samples(req.temperature)
    if sample:
        torch.manual_seed(req.seed if req.seed is not None else torch.seed())
    config = gen.generation_config(req.max_tokens, slots.eos, slots.pad, sample=sample,
                                   temperature=req.temperature, top_p=req.top_p)
    forced = req.prompt_ids[len(req.prompt_ids) - req.forced:] if req.forced else ()
    dec = Decoder(slots.tokenizer, req.stop, on_text, cancelled, forced)
    ids, mask = gen.left_pad([list(req.prompt_ids)], slots.pad, slots.device)   # (1, P)
    with torch.inference_mode(), slots.activate(slot):
        gen.generate(slots.model, ids, mask, config, streamer=dec,
                     stopping_criteria=StoppingCriteriaList([dec]))
    text = dec.finish()
    out = dec.ids[req.forced:]
    if dec.cut is not None or (out and out[-1] in slots.eos):
        reason = "stop"
    else:
        reason = "length" if len(out) >= req.max_tokens else "stop"   # else: cancelled
    return GenResult(text, out, reason, len(req.prompt_ids), len(out))


POLL_S = 0.1   # how often a non-streamed request asks whether its client is still there


async def outcome(fut, request, cancel: threading.Event):
    """The model thread's result (a concurrent Future) for a non-streamed request. Meanwhile
    the client is asked after every POLL_S (Starlette's `is_disconnected`): once it has hung
    up, `cancel` is set, which the generation polls each step (Decoder, batch.RowStops), so the
    one model thread is free for the requests behind it. request None: nothing is watched."""
    waiting = asyncio.wrap_future(fut)
    while True:
        done, _ = await asyncio.wait({waiting}, timeout=POLL_S)
        if done:
            return waiting.result()
        if request is not None and not cancel.is_set() and await request.is_disconnected():
            cancel.set()
