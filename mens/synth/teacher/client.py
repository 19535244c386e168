"""One teacher endpoint: ask it for a named structured output, get the checked object back.

    client = TeacherClient(endpoint, settings, ledger)
    reply = client.ask("mens_samples", messages)       # → Reply (never raises for bad output)

Through the official `openai` client against any OpenAI-compatible `base_url`. The request asks
for `response_format = {"type": "json_schema", "json_schema": {"name": NAME, "schema": ...,
"strict": true}}` when the endpoint has the `json_schema` capability. An endpoint without it —
or one that answers 400/422 naming response_format (then remembered for the rest of the run,
said once as `mens: note:` and in the ledger's notes) — gets the same schema in the prompt
instead; such a reply is validated the same way and, when nothing in it was usable, asked ONCE
more with the validation error. Bad output is counted in the ledger and returned as a Reply
with `data=None` (or, for mens_samples, with only the valid samples): it never raises.

What does raise is `TeacherUnavailable` — this endpoint cannot answer at all: the connection is
refused (or the host unknown: not retried), 401/403, 404 (model not found), another 4xx, the
key's environment variable is unset, or 429 / 5xx / timeouts / dropped connections persisted
through `max_retries`. mens.synth.teacher.routing then tries the next candidate. Retries are mens's
own (the openai client runs with max_retries=0), so each one is counted: waits of
backoff_s · 2^attempt (capped at 60 s), or the server's Retry-After.

The key is read from os.environ[api_key_env] at the endpoint's first request and lives only
inside the openai client: reasons and notes are written by mens (a 401's server text, which may quote part
of the key, is never copied), and any server text kept is scrubbed of the key.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field

from mens.synth.teacher.schemas import Checked, check, response_format, schema_instruction
from mens.synth.teacher.stats import Ledger, TeacherStats

MAX_WAIT_S = 60.0      # longest single backoff, whatever Retry-After says


class TeacherUnavailable(Exception):
    """This endpoint cannot answer; `reason` is one clause for the cascade's error."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Endpoint:
    """One candidate (conf/teacher/*.yaml `candidates[]`, or teacher=endpoint's keys)."""
    name: str
    base_url: str
    model: str
    api_key_env: str | None = None
    price_in_per_mtok: float | None = None
    price_out_per_mtok: float | None = None
    price_date: str | None = None
    price_source: str | None = None
    capabilities: tuple[str, ...] = ()


@dataclass(frozen=True)
class Settings:
    """The request knobs shared by every candidate (teacher.* in the config)."""
    max_retries: int = 4
    backoff_s: float = 1.0
    timeout_s: float = 120.0
    temperature: float = 0.7
    max_tokens: int = 4096


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None      # None: the teacher has no price


@dataclass
class Reply:
    """A checked answer. `data`: the validated object (mens_samples: only its valid samples) or
    None; `problems`: what was wrong (for diagnostics / quarantine); `dropped`: the samples left
    out, each {"item", "error"}; `teacher` / `model`: which candidate answered and the model id it
    reported (provenance); `mode`: json_schema or prompt; `raw`: the last reply's text."""
    name: str
    data: dict | None
    teacher: str
    model: str
    mode: str
    problems: list[str] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    raw: str | None = None

    @property
    def ok(self) -> bool:
        return self.data is not None


class TeacherClient:
    """One endpoint of a cascade, safe to use from many threads at once."""

    def __init__(self, endpoint: Endpoint, settings: Settings, ledger: Ledger):
        self.endpoint, self.settings, self.ledger = endpoint, settings, ledger
        self.structured = "json_schema" in endpoint.capabilities
        ledger.register(endpoint.name, TeacherStats(
            model=endpoint.model, base_url=endpoint.base_url,
            price_in_per_mtok=endpoint.price_in_per_mtok,
            price_out_per_mtok=endpoint.price_out_per_mtok,
            price_date=endpoint.price_date, price_source=endpoint.price_source))
        self._key: str | None = None
        self._client = None
        self._lock = threading.Lock()

    # --- the one call -----------------------------------------------------------------------
    def ask(self, name: str, messages: list[dict], **params) -> Reply:
        """Ask for `name` (one of schemas.NAMES). `params` may set
        temperature, max_tokens or seed for this call. Raises TeacherUnavailable only."""
        text, mode, sent, usage, model, cut = self._send(name, messages, params)
        checked = self._count(name, check(name, text), usage)
        if checked.data is None and mode == "prompt":
            # One more try carrying the validation error (the schema was only in the prompt).
            retry = [*sent, {"role": "assistant", "content": text or ""},
                     {"role": "user", "content": f"That reply was not valid: {checked.error}. "
                                                 f"Answer again with only the JSON object."}]
            text, mode, _, more, model, cut = self._send(name, retry, params, prompt_ready=True)
            usage = Usage(usage.prompt_tokens + more.prompt_tokens,
                          usage.completion_tokens + more.completion_tokens)
            checked = self._count(name, check(name, text), more)
        stats = self.ledger.teachers[self.endpoint.name]
        usage.cost_usd = stats.cost(usage.prompt_tokens, usage.completion_tokens)
        problems = list(checked.violations)
        if cut:
            problems.append("the reply was cut at max_tokens")
        return Reply(name=name, data=checked.data, teacher=self.endpoint.name, model=model,
                     mode=mode, problems=problems, dropped=checked.dropped, usage=usage, raw=text)

    def _count(self, name: str, checked: Checked, usage: Usage) -> Checked:
        counts = {"calls": 1, "ok": int(checked.data is not None),
                  "invalid_json": int(checked.invalid_json),
                  "schema_violations": int(bool(checked.violations) and not checked.invalid_json),
                  "prompt_tokens": usage.prompt_tokens,
                  "completion_tokens": usage.completion_tokens}
        if name in ("mens_samples", "mens_tool_samples"):
            counts["samples_kept"] = len((checked.data or {}).get("samples", []))
            counts["samples_dropped"] = len(checked.dropped)
        self.ledger.add(self.endpoint.name, **counts)
        return checked

    # --- one request, its retries and the response_format fallback -------------------------
    def _send(self, name: str, messages: list[dict], params: dict, prompt_ready: bool = False):
        """→ (text, mode, messages sent, usage, model id, cut at max_tokens)."""
        import openai

        client = self._openai()
        while True:
            structured = self.structured and not prompt_ready
            sent = messages if structured or prompt_ready else with_schema(messages, name)
            extra = {"response_format": response_format(name)} if structured else {}
            self.ledger.set_mode(self.endpoint.name, "json_schema" if structured else "prompt")
            try:
                c = self._with_retries(lambda: client.chat.completions.create(
                    model=self.endpoint.model, messages=sent,
                    temperature=params.get("temperature", self.settings.temperature),
                    max_tokens=params.get("max_tokens", self.settings.max_tokens),
                    **({"seed": params["seed"]} if params.get("seed") is not None else {}),
                    **extra))
            except openai.APIStatusError as e:          # 400 / 422 / another 4xx
                if structured and e.status_code in (400, 422) and _names_response_format(e):
                    self._structured_refused(e)
                    continue
                raise TeacherUnavailable(f"{e.status_code} {self._server_text(e)}") from None
            except openai.OpenAIError as e:             # e.g. a 200 whose body is not a completion
                raise TeacherUnavailable(f"not an OpenAI-compatible answer ({type(e).__name__}: "
                                         f"{self._server_text(e)})") from None
            choice = c.choices[0] if c.choices else None
            text = choice.message.content if choice is not None else None
            u = c.usage
            usage = Usage(getattr(u, "prompt_tokens", 0) or 0,
                          getattr(u, "completion_tokens", 0) or 0)
            if u is None:
                self.ledger.note(self.endpoint.name, "the endpoint reports no token usage")
            cut = choice is not None and choice.finish_reason == "length"
            return (text, "json_schema" if structured else "prompt", sent, usage,
                    c.model or self.endpoint.model, cut)

    def _with_retries(self, request):
        import openai

        s = self.settings
        for attempt in range(s.max_retries + 1):
            try:
                return request()
            except openai.APIConnectionError as e:       # APITimeoutError is one too
                refused = _connect_error(e)               # refused / no such host: no retry
                if refused is not None:
                    raise TeacherUnavailable(f"cannot connect to {self.endpoint.base_url} "
                                             f"({_short(refused)})") from None
                last, wait = ("timed out" if isinstance(e, openai.APITimeoutError)
                              else f"connection failed ({_short(e.__cause__ or e)})"), None
            except openai.AuthenticationError:
                raise TeacherUnavailable(f"401 Unauthorized: {self._key_clause()} was refused"
                                         ) from None
            except openai.PermissionDeniedError:
                raise TeacherUnavailable(f"403 Forbidden: {self._key_clause()} may not use "
                                         f"model {self.endpoint.model}") from None
            except openai.NotFoundError as e:
                raise TeacherUnavailable(f"404 Not Found: model {self.endpoint.model} (or the "
                                         f"API path) does not exist there — "
                                         f"{self._server_text(e)}") from None
            except openai.APIStatusError as e:
                if e.status_code != 429 and e.status_code < 500:
                    raise                              # 400 / 422 / ...: _send decides
                last, wait = f"{e.status_code} {self._server_text(e)}", _retry_after(e)
            if attempt == s.max_retries:
                raise TeacherUnavailable(f"{last} — still after {s.max_retries} retries")
            self.ledger.add(self.endpoint.name, retries=1)
            time.sleep(min(MAX_WAIT_S, wait if wait is not None else s.backoff_s * 2 ** attempt))

    # --- helpers ----------------------------------------------------------------------------
    def _openai(self):
        """The openai client, built on first use: the key is read from the environment then."""
        with self._lock:
            if self._client is None:
                import openai

                env = self.endpoint.api_key_env
                if env:
                    self._key = os.environ.get(env) or None
                    if self._key is None:
                        raise TeacherUnavailable(f"the environment variable {env} (its key) is "
                                                 f"not set")
                # a server without keys still needs a non-empty string in the client
                self._client = openai.OpenAI(base_url=self.endpoint.base_url,
                                             api_key=self._key or "none", max_retries=0,
                                             timeout=self.settings.timeout_s)
            return self._client

    def _structured_refused(self, e) -> None:
        with self._lock:
            if not self.structured:
                return
            self.structured = False
        text = (f"{self.endpoint.name} refused response_format ({e.status_code}): the schema "
                f"goes into the prompt for the rest of this run")
        self.ledger.note(self.endpoint.name, text)
        print(f"mens: note: teacher {text}", file=sys.stderr)

    def _key_clause(self) -> str:
        env = self.endpoint.api_key_env
        return f"the key in ${env}" if env else "the request without a key (api_key_env is null)"

    def _server_text(self, e) -> str:
        """The server's error message, one line, short, with the key scrubbed out."""
        body = getattr(e, "body", None)
        msg = body.get("message") if isinstance(body, dict) else None
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            msg = body["error"].get("message")
        text = " ".join(str(msg or getattr(e, "message", "") or e).split())[:200]
        return text.replace(self._key, "***") if self._key else text


def with_schema(messages: list[dict], name: str) -> list[dict]:
    """The messages with the schema instruction added to the system message (or a new one)."""
    instruction = schema_instruction(name)
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system" and isinstance(out[0].get("content"), str):
        out[0]["content"] = f"{out[0]['content']}\n\n{instruction}"
    else:
        out.insert(0, {"role": "system", "content": instruction})
    return out


def _names_response_format(e) -> bool:
    text = f"{getattr(e, 'message', '')} {getattr(e, 'body', '')}".lower()
    return "response_format" in text or "json_schema" in text


def _connect_error(e) -> BaseException | None:
    """The connect failure under an APIConnectionError, if that is what it is. By class name:
    openai's transport is httpx or, in newer releases, httpx2 (both name it ConnectError)."""
    seen = e.__cause__ or e.__context__
    while seen is not None:
        if type(seen).__name__ == "ConnectError" or isinstance(seen, ConnectionRefusedError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _retry_after(e) -> float | None:
    try:
        return max(0.0, float(e.response.headers.get("retry-after")))
    except (AttributeError, TypeError, ValueError):
        return None


def _short(e) -> str:
    return " ".join(str(e).split())[:160] or type(e).__name__
