"""A model's answer read back as OpenAI tool calls (issue #38): `message.tool_calls`, and the
same calls streamed as OpenAI streams them.

The calls are read by mens.data.tool_syntax.parse in the syntax the served run's template
writes (hermes, llama3, mistral), so what training taught is what serving reads. OpenAI's shape:
    {"id": "call_…", "type": "function", "function": {"name", "arguments": "<JSON string>"}}
`finish_reason` is "tool_calls" when the answer holds calls, and `content` is null when it has
no text besides them. Ids are fresh per call: `call_` + 24 letters/digits, or 9 letters/digits
for the mistral syntax (its template refuses any other id when the client sends the call back).

Never a 500, never an invented call: an answer whose call does not parse (no arguments
object, arguments that are not JSON — NaN, Infinity), one that calls a function the request's
`tools` do not offer (issue #49: a JSON answer `{"name": "Alice", …}` is not a call to "Alice"),
or one that calls no tool when `tool_choice` required one, comes back as plain content (the
model's whole text) with its own finish_reason. A named `tool_choice` keeps the calls to that
function and drops the others that ride along; `parallel_tool_calls: false` keeps the first
call, as vLLM does. Each of these is printed on the server's console and counted in `Counts`
(/health `tool_calls`; a call to a function not offered counts as `malformed`): loud, never
silent.

Streaming: text that cannot belong to a call streams as content while it is generated; a call
is sent once the answer is over and it has parsed — its id, type and name in one delta, then
its arguments in the next (what the `openai` client accumulates) — so a stream never holds half
a call that turns out not to parse. The content streamed is always a prefix of the final
content (`safe_prefix`), so stream and non-stream answers are the same.
"""
from __future__ import annotations

import json
import secrets
import string
import sys
import threading

from mens.data import tool_syntax as TS

_ALNUM = string.ascii_letters + string.digits
MARKERS = {"hermes": "<tool_call>", "mistral": "[TOOL_CALLS]"}


class Counts:
    """What the server did with tool calls since it started (thread-safe; /health shows it)."""
    KEYS = ("answers_with_calls", "calls", "malformed", "required_unmet", "parallel_dropped")

    def __init__(self):
        self._lock = threading.Lock()
        self._n = dict.fromkeys(self.KEYS, 0)

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._n[key] += n

    def state(self) -> dict:
        with self._lock:
            return dict(self._n)


def call_id(syntax: str | None) -> str:
    n = 9 if syntax == "mistral" else 24
    tail = "".join(secrets.choice(_ALNUM) for _ in range(n))
    return tail if syntax == "mistral" else f"call_{tail}"


def openai_call(call: dict, syntax: str | None) -> dict:
    """mens's call (arguments an object) → OpenAI's (arguments a JSON string, a fresh id)."""
    fn = call["function"]
    return {"id": call_id(syntax), "type": "function",
            "function": {"name": fn["name"],   # allow_nan: the parser let none through
                         "arguments": json.dumps(fn["arguments"], ensure_ascii=False,
                                                 allow_nan=False)}}


class Reader:
    """How one chat answer is read back. syntax: the run's (mens.data.tool_syntax);
    required: tool_choice `required` or a named function (`name`); parallel:
    parallel_tool_calls (None: true, OpenAI's default); offered: the names of the request's
    `tools` (None: not checked — a reader with no request behind it)."""

    def __init__(self, syntax: str, counts: Counts, required: bool = False,
                 name: str | None = None, parallel: bool | None = None,
                 offered: set[str] | None = None):
        self.syntax, self.counts = syntax, counts
        self.required, self.name = required or name is not None, name
        self.parallel = parallel is not False
        self.offered = None if offered is None else set(offered)

    def read(self, text: str, finish_reason: str) -> tuple[str | None, list[dict], str]:
        """(content, OpenAI tool calls, finish_reason) of an answer."""
        try:
            p = TS.parse(text, self.syntax)
        except (RecursionError, ValueError) as e:   # JSON nested past Python's limit
            p = TS.Parsed(text, [], f"{type(e).__name__}: {e}")
        calls, why = p.calls, p.malformed
        if calls and self.name is not None:   # the named function's calls; the rest dropped
            kept = [c for c in calls if c["function"]["name"] == self.name]
            others = sorted({c["function"]["name"] for c in calls} - {self.name})
            if others and kept:
                self.counts.add("parallel_dropped", len(calls) - len(kept))
                _say(f"tool_choice named {self.name!r}: the model also called "
                     f"{', '.join(others)}; {len(calls) - len(kept)} such call(s) dropped")
            elif others:
                _say(f"tool_choice named {self.name!r} but the model called {', '.join(others)}")
            calls = kept
        stray = sorted({c["function"]["name"] for c in calls} - self.offered) \
            if self.offered is not None else []
        if stray:   # as a call that does not parse: the model's text, whole, is the answer
            calls, why = [], (f"it calls {', '.join(map(repr, stray))}, which the request's "
                              f"`tools` do not offer")
        if why:
            self.counts.add("malformed")
            _say(f"{'a call names no tool offered' if stray else 'a tool call did not parse'} "
                 f"({why}): answered as content, status 200")
        if not calls:
            if self.required:
                self.counts.add("required_unmet")
                _say("tool_choice required a call and the answer holds none that parses: "
                     "answered as content (mens forces only the call's opening, not the rest)")
            return text, [], finish_reason
        if len(calls) > 1 and not self.parallel:
            self.counts.add("parallel_dropped", len(calls) - 1)
            _say(f"parallel_tool_calls=false: the model wrote {len(calls)} calls; the first "
                 f"is answered, {len(calls) - 1} dropped")
            calls = calls[:1]
        self.counts.add("answers_with_calls")
        self.counts.add("calls", len(calls))
        return p.content or None, [openai_call(c, self.syntax) for c in calls], "tool_calls"

    def message(self, text: str, finish_reason: str) -> tuple[dict, str]:
        content, calls, reason = self.read(text, finish_reason)
        msg = {"role": "assistant", "content": content}
        if calls:
            msg["tool_calls"] = calls
        return msg, reason


def _marker_cut(text: str, marker: str) -> int:
    """Where a call marker may begin: its first occurrence, else the longest suffix of `text`
    that could still grow into it, else len(text). No marker can start before this point,
    whatever comes next."""
    at = text.find(marker)
    if at >= 0:
        return at
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-k:]):
            return len(text) - k
    return len(text)


def safe_prefix(text: str, syntax: str) -> str:
    """The longest start of `text` that is a start of the final content, whatever the model
    writes next (see Reader.read: the content is the whole text, or the syntax's text outside
    the calls, stripped)."""
    bare = text.lstrip()
    if syntax == "llama3":   # a call is the whole answer: {…} (after an optional python tag)
        tag = "<|python_tag|>"
        if not bare or bare.startswith(("{", tag)) or tag.startswith(bare):
            return ""
        return text
    if syntax == "mistral" and (bare.startswith('[{"name"') or '[{"name"'.startswith(bare)):
        return ""            # a call whose [TOOL_CALLS] marker decoded away (a special token)
    head = text[:_marker_cut(text, MARKERS.get(syntax, "<tool_call>"))]
    if not head or head[0].isspace():
        return ""            # stripped if a call follows, kept if none does: not known yet
    return head.rstrip()


class Splitter:
    """One streamed answer: `feed` each final piece of text, get the content to send now;
    `finish` with the whole text gives the rest (content, calls, finish_reason)."""

    def __init__(self, reader: Reader):
        self.reader, self.text, self.sent = reader, "", ""

    def feed(self, piece: str) -> str:
        self.text += piece
        safe = safe_prefix(self.text, self.reader.syntax)
        if len(safe) <= len(self.sent):
            return ""
        out, self.sent = safe[len(self.sent):], safe
        return out

    def finish(self, text: str, finish_reason: str) -> tuple[str, list[dict], str]:
        content, calls, reason = self.reader.read(text, finish_reason)
        content = content or ""
        if not content.startswith(self.sent):   # safe_prefix's promise broken: a bug, said
            _say(f"streamed content {self.sent!r} is not the start of the answer's content")
            return "", calls, reason
        return content[len(self.sent):], calls, reason


def stream_deltas(calls: list[dict]) -> list[dict]:
    """The deltas that carry `calls` in a stream: per call, its index, id, type and name (with
    empty arguments), then its arguments — the shape OpenAI streams and the `openai` client
    accumulates (it concatenates strings: a name or id sent twice would be doubled)."""
    out = []
    for i, c in enumerate(calls):
        out.append({"tool_calls": [{"index": i, "id": c["id"], "type": "function", "function": {
            "name": c["function"]["name"], "arguments": ""}}]})
        out.append({"tool_calls": [{"index": i, "function": {
            "arguments": c["function"]["arguments"]}}]})
    return out


def _say(note: str) -> None:
    print(f"mens: note: {note}", file=sys.stderr, flush=True)
