"""The OpenAI-compatible HTTP API over `Slots`, as a FastAPI app.

Request bodies are the strict pydantic models of mens.serve.requests; a field the server does
not implement — an OpenAI one set to anything but its no-op value, or any other — is refused
with a 400 that names every such field (nothing is ignored silently). Every error — FastAPI's
validation errors, unknown routes, our own checks — is answered in OpenAI's shape
`{"error": {"message", "type", "param", "code"}}` with a 4xx status; an unexpected exception
(in a handler or on the model thread) in the same shape with 500 and type `server_error`.
"""
from __future__ import annotations

import asyncio
import json
import secrets
import threading
from dataclasses import replace

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException

from mens.serve import batch, lora_admin, tool_calls
from mens.serve import chat as chat_prompt
from mens.serve.admission import Admission, Place, QueueFull
from mens.serve.api_error import APIError, error_body
from mens.serve.generate import GenRequest, generate, outcome
from mens.serve.requests import (Body, ChatRequest, CompletionRequest, PromoteRequest,
                                 RollbackRequest, Sampling, unsupported, unsupported_message)
from mens.serve.slots import PromotionRefused, Slots


def _refuse_unsupported(req: Body) -> None:
    found = unsupported(req)
    if found:
        raise APIError(400, unsupported_message(req, found), param=found[0][0],
                       code="unsupported_parameter")


# --- the app -----------------------------------------------------------------------------------
def build_app(slots: Slots, api_key: str | None = None, max_body_bytes: int = 1 << 20,
              default_max_tokens: int = 256, max_header_bytes: int = 16384,
              max_queue: int = 32, runtime_lora: bool = False, max_batch_tokens: int = 65536):
    app = FastAPI(title="mens", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.slots = slots
    admission = Admission(max_queue)
    counts = tool_calls.Counts()   # what was done with tool calls (/health): never silent

    def auth(request: Request) -> None:
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(
                token.strip().encode("utf-8", "replace"), api_key.encode()):
            raise APIError(401, "Incorrect or missing API key: send `Authorization: Bearer "
                                "<key>`, the key in the environment variable that "
                                "serve.api_key_env names.", code="invalid_api_key")

    @app.exception_handler(APIError)
    async def _api_error(request, e: APIError):
        return JSONResponse(error_body(e.message, e.type, e.param, e.code), status_code=e.status)

    @app.exception_handler(QueueFull)
    async def _busy(request, e: QueueFull):
        return JSONResponse(error_body(str(e), "server_error", None, "server_busy"),
                            status_code=503, headers={"Retry-After": str(e.retry_after)})

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, e: RequestValidationError):
        err = (e.errors() or [{}])[0]
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        if err.get("type") == "json_invalid":
            return JSONResponse(error_body(
                "The body of the request is not valid JSON: we could not parse it."),
                status_code=400)
        return JSONResponse(error_body(
            f"{'.'.join(loc) or 'body'}: {err.get('msg', 'invalid request')}",
            param=".".join(loc) or None, code=err.get("type")), status_code=400)

    @app.exception_handler(Exception)
    async def _crash(request, e: Exception):
        # Starlette still re-raises `e` after this answer, so the server log keeps the traceback
        detail = " ".join(f"{type(e).__name__}: {e}".split())[:500]
        return JSONResponse(error_body(f"The server had an error while processing the request "
                                       f"({detail}).", "server_error"), status_code=500)

    @app.exception_handler(HTTPException)
    async def _http(request, e: HTTPException):
        status = e.status_code if 400 <= e.status_code < 500 else 400
        code = {413: "request_too_large"}.get(status)
        return JSONResponse(error_body(str(e.detail), code=code), status_code=status,
                            headers=getattr(e, "headers", None))

    @app.get("/health")
    async def health():
        return {"status": "ok", "models": [m for m, _ in slots.model_ids()],
                "memory": slots.memory(), "queue": admission.state(),
                "tool_calls": counts.state()}

    @app.get("/v1/models", dependencies=[Depends(auth)])
    async def models():
        return {"object": "list", "data": [_model_card(slots, m, t) for m, t in slots.model_ids()]}

    @app.get("/v1/models/{model_id:path}", dependencies=[Depends(auth)])
    async def model(model_id: str):
        for m, t in slots.model_ids():
            if m == model_id:
                return _model_card(slots, m, t)
        raise _no_model(slots, model_id)

    @app.post("/v1/chat/completions", dependencies=[Depends(auth)])
    async def chat(req: ChatRequest, request: Request):
        _refuse_unsupported(req)
        slot = _slot(slots, req.model)
        try:   # messages, tools and tool_choice as training renders them (mens.serve.chat)
            p = chat_prompt.build(slots, slot, req, counts)
        except chat_prompt.ChatError as e:
            raise APIError(400, e.message, e.param, e.code)
        gen = _gen_request(slots, req, p.ids, req.max_completion_tokens, default_max_tokens)
        gen = replace(gen, forced=p.forced)
        batch.check_size(req, 1, req.n or 1, len(p.ids), gen.max_tokens, max_batch_tokens)
        if req.top_logprobs and not req.logprobs:   # as OpenAI: never ignored
            raise APIError(400, "top_logprobs: logprobs must be true when top_logprobs is set.",
                           "top_logprobs")
        if batch.wanted(req, 1):   # n, logprobs, token ids: one batch of choices (mens.serve.batch)
            return await batch.respond(slots, slot, [p.ids], gen, req.n or 1, admission,
                                       batch.head(req, slot, True), True, p.reader, bool(req.logprobs),
                                       req.top_logprobs or 0, bool(req.return_token_ids),
                                       request=request)
        return await _respond(slots, slot, req, gen, admission, chat=True, reader=p.reader,
                              request=request)

    @app.post("/v1/completions", dependencies=[Depends(auth)])
    async def completions(req: CompletionRequest, request: Request):
        _refuse_unsupported(req)
        slot = _slot(slots, req.model)
        p = req.prompt
        many = p if isinstance(p, list) and p and isinstance(p[0], (str, list)) else [p]
        if len(many) * (req.n or 1) > batch.MAX_ROWS:
            raise APIError(400, f"prompt: at most {batch.MAX_ROWS} answers (prompts × n) per "
                                f"request.", "prompt")
        prompts = [batch.prompt_ids(slots, q) for q in many]
        gen = _gen_request(slots, req, max(prompts, key=len), None, default_max_tokens)
        batch.check_size(req, len(prompts), req.n or 1, max(map(len, prompts)), gen.max_tokens,
                         max_batch_tokens)
        if batch.wanted(req, len(prompts)):   # n, logprobs, a batch of prompts: mens.serve.batch
            return await batch.respond(slots, slot, prompts, gen, req.n or 1, admission,
                                       batch.head(req, slot, False), False, None,
                                       req.logprobs is not None, req.logprobs or 0,
                                       bool(req.return_token_ids), req.prompt_logprobs,
                                       request=request)
        prompt = prompts[0]
        return await _respond(slots, slot, req, gen, admission, chat=False, request=request)

    @app.get("/admin/aliases", dependencies=[Depends(auth)])
    async def aliases():
        return {"aliases": slots.aliases, "history": slots.history}

    @app.post("/admin/promote", dependencies=[Depends(auth)])
    async def promote(req: PromoteRequest):
        _refuse_unsupported(req)
        try:
            return slots.promote(req.spoke, req.slot)
        except KeyError as e:
            raise APIError(404, str(e.args[0]), "slot" if req.slot else "spoke", "not_found")
        except PromotionRefused as e:   # the gate: a state conflict, not a malformed request
            raise APIError(409, e.message, "slot", "gate_not_passed")
        except ValueError as e:
            raise APIError(400, str(e), "slot")

    @app.post("/admin/rollback", dependencies=[Depends(auth)])
    async def rollback(req: RollbackRequest):
        _refuse_unsupported(req)
        try:
            return slots.rollback(req.spoke)
        except ValueError as e:
            raise APIError(400, str(e), "spoke")

    lora_admin.add_routes(app, slots, auth, runtime_lora)
    from mens.serve.limits import Limits
    return Limits(app, max_body_bytes, max_header_bytes)


def _model_card(slots: Slots, model_id: str, target: str | None) -> dict:
    slot = slots.resolve(model_id)
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "mens",
            "root": target or model_id, "parent": None if slot.adapter is None else "base",
            "spoke": slot.spoke, "lane": slot.lane}


def _no_model(slots: Slots, model_id: str) -> APIError:
    known = ", ".join(m for m, _ in slots.model_ids())
    return APIError(404, f"The model `{model_id[:200]}` does not exist. Models here: {known}.",
                    "model", "model_not_found")


def _slot(slots: Slots, model_id: str):
    slot = slots.resolve(model_id)
    if slot is None:
        raise _no_model(slots, model_id)
    return slot


def _gen_request(slots: Slots, req: Sampling, prompt: list[int], alt_max: int | None,
                 default_max: int) -> GenRequest:
    room = slots.context - len(prompt)
    if room <= 0:
        raise APIError(400, f"This model's maximum context length is {slots.context} tokens; "
                            f"the prompt alone is {len(prompt)}.",
                       "messages" if isinstance(req, ChatRequest) else "prompt",
                       "context_length_exceeded")
    if alt_max is not None and req.max_tokens is not None and req.max_tokens != alt_max:
        raise APIError(400, f"max_tokens={req.max_tokens} and max_completion_tokens={alt_max}: "
                            f"give one of them.", "max_tokens")
    key = "max_completion_tokens" if alt_max is not None else "max_tokens"
    want = alt_max if alt_max is not None else req.max_tokens
    if want is not None and want <= 0:
        raise APIError(400, f"{key}: it must be at least 1 (got {want}).", key)
    if want is not None and want > room:
        raise APIError(400, f"This model's maximum context length is {slots.context} tokens: "
                            f"{len(prompt)} in the prompt + {key}={want} is over it.", key,
                       "context_length_exceeded")
    if req.stream_options is not None and not req.stream:   # as OpenAI: never ignored silently
        raise APIError(400, "stream_options is only allowed when stream is true.", "stream_options")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if any(not s for s in stop):
        raise APIError(400, "stop: empty stop strings are not allowed.", "stop")
    temp = 1.0 if req.temperature is None else req.temperature
    return GenRequest(tuple(prompt), want if want is not None else min(default_max, room), temp,
                      1.0 if req.top_p is None else req.top_p, req.seed, tuple(stop))


def _usage(r) -> dict:
    return {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
            "total_tokens": r.prompt_tokens + r.completion_tokens}


class _QueuedStream(StreamingResponse):
    """A stream that owns its queue place: whatever ends the response — the last chunk, a
    client gone before the body started (Starlette may then never iterate the generator, so
    its `finally` never runs), a cancellation — gives back a place whose work never reached
    the model thread. Work that did reach it gives the place back itself (Place.run_by)."""

    def __init__(self, place: Place, content, **kwargs):
        super().__init__(content, **kwargs)
        self.place = place

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.place.abandon()


async def _respond(slots: Slots, slot, req: Sampling, gen: GenRequest, admission: Admission,
                   chat: bool, reader: tool_calls.Reader | None = None, request=None):
    head = batch.head(req, slot, chat)
    place = admission.enter()        # QueueFull → 503 with Retry-After
    if req.stream:
        return _QueuedStream(place, _sse(slots, slot, req, gen, chat, head, place, reader),
                             media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    cancel = threading.Event()       # set when the client goes away (generate.outcome)
    try:
        fut = slots.run(generate, slots, slot, gen, None, cancel.is_set)
        place.run_by(fut)
    finally:
        place.abandon()              # only if the work never reached the model thread
    r = await outcome(fut, request, cancel)
    msg, reason = reader.message(r.text, r.finish_reason) if reader else \
        ({"role": "assistant", "content": r.text}, r.finish_reason)
    choice = ({"index": 0, "message": msg, "logprobs": None, "finish_reason": reason} if chat else
              {"index": 0, "text": r.text, "logprobs": None, "finish_reason": r.finish_reason})
    return {**head, "object": "chat.completion" if chat else "text_completion",
            "choices": [choice], "usage": _usage(r)}


async def _sse(slots: Slots, slot, req: Sampling, gen: GenRequest, chat: bool, head: dict,
               place: Place, reader: tool_calls.Reader | None = None):
    """Server-sent events: one chunk per piece of final text, then finish_reason, [DONE].
    The request's queue place goes to the model thread with the work (Place.run_by).
    reader: tools were given — text streams only where it cannot be a call, calls come at the
    end (mens.serve.tool_calls)."""
    split = tool_calls.Splitter(reader) if reader else None
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    cancel = threading.Event()   # set when the client goes away: generation stops early

    def put(item):
        loop.call_soon_threadsafe(queue.put_nowait, item)

    obj = "chat.completion.chunk" if chat else "text_completion"
    usage_wanted = bool(req.stream_options and req.stream_options.include_usage)

    def chunk(text=None, finish=None, role=False, delta=None) -> str:
        if chat and delta is None:
            # with tools, content stays null unless text comes (OpenAI's calling answer)
            delta = {"role": "assistant", "content": None if split else ""} if role else \
                ({"content": text} if text is not None else {})
        if chat:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        body = {**head, "object": obj, "choices": [choice]}
        if usage_wanted:
            body["usage"] = None
        return f"data: {json.dumps(body)}\n\n"

    fut = slots.run(generate, slots, slot, gen, lambda t: put(("text", t)), cancel.is_set)
    place.run_by(fut)                # released before the client hears "done"
    fut.add_done_callback(lambda f: put(("done", f)))
    try:
        if chat:
            yield chunk(role=True)
        while True:
            kind, value = await queue.get()
            if kind == "text":
                value = split.feed(value) if split else value
                if value:
                    yield chunk(text=value)
                continue
            try:
                r = value.result()
            except Exception as e:  # the stream has begun: the error goes in an event
                # an APIError in its own shape (#49: an adapter unloaded while the request waited)
                body = error_body(e.message, e.type, e.param, e.code) if isinstance(e, APIError) \
                    else error_body(f'generation failed: {e}', 'server_error')
                yield f"data: {json.dumps(body)}\n\n"
                break
            reason = r.finish_reason
            if split:   # the content not streamed yet, then the calls
                rest, calls, reason = split.finish(r.text, r.finish_reason)
                if rest:
                    yield chunk(text=rest)
                for d in tool_calls.stream_deltas(calls):
                    yield chunk(delta=d)
            yield chunk(finish=reason)
            if usage_wanted:
                yield f"data: {json.dumps({**head, 'object': obj, 'choices': [], 'usage': _usage(r)})}\n\n"
            break
        yield "data: [DONE]\n\n"
    finally:
        cancel.set()
