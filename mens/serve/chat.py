"""A chat request → the token ids the model reads, and the Reader that reads its answer back
(issue #38).

Messages in OpenAI's form become mens.data's form through the functions training uses
(mens.data.tools: message_calls, normalize_tools, link_results): a call's `arguments` — a JSON
string, as OpenAI sends them — become an object, a null content on a calling turn becomes "",
a `tool` turn is tied to the call it answers. The run's encoder then renders them with the
template, options, system folding and tool rendering of training (Slots.prompt_text →
RunEncoder.prompt_text), so a conversation is served exactly as it was trained. A call in the
history may name a function the request's `tools` no longer list (a client may change its tool
set mid-conversation): it is rendered as given. Every problem is a ChatError → 400 naming the
field (arguments that are not JSON, a tool turn that answers no call, a content null where no
call is made, a template that cannot render tools).

tool_choice, on models without a grammar (mens decodes with plain transformers `generate`):
  auto      (the default with tools) tools rendered, calls read back in the run's syntax.
  none      the tools are NOT rendered and nothing is parsed: OpenAI's "the model will not call
            a tool". vLLM renders them anyway unless told otherwise; mens does not, because its
            models learned "schemas in the prompt ⇒ call" from their training records — shown
            the schemas while forbidden to call, they would write a call that could only come
            back as raw text. Without them the model answers as it learned to on tool-less
            prompts. Calls already in the history are still rendered.
  required  the answer is opened with the template's own call opening up to the function
  / named   name (`<tool_call>\\n{"name": "`), or for a named function up to its arguments
            (`…"name": "get_weather", "arguments": `): those tokens are fed as input, cut at a
            token boundary of the rendered call, and the model writes the rest. That is the
            cheap part of constrained decoding; the rest is validated, not constrained — an
            answer that still holds no call that parses comes back as content (Reader says so,
            counted). Where the opening cannot be found, nothing is forced, and the server says so.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from mens.data import tools as T
from mens.errors import DataError
from mens.serve.requests import ChatRequest, NamedToolChoice
from mens.serve.tool_calls import Counts, Reader

_NAME, _ARG = "\ue010", "\ue011"   # sentinels of a probe call (private use: no template trims)


class ChatError(Exception):
    """A request that cannot be served as asked: a 400 naming `param`."""

    def __init__(self, message: str, param: str | None, code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


@dataclass
class Prompt:
    ids: list[int]             # the prompt, then the forced opening of the answer (if any)
    forced: int                # how many of the last ids are that opening
    reader: Reader | None      # None: the answer is plain text (no tools, or tool_choice none)


def messages(req: ChatRequest, system_prompt: str | None = None) -> list[dict]:
    """The request's messages in mens.data's form (ChatError names a bad field)."""
    out = []
    for i, m in enumerate(req.messages):
        key = f"messages[{i}]"
        role = "system" if m.role == "developer" else m.role
        for j, c in enumerate(m.tool_calls or []):
            if c.index is not None and c.index != j:
                raise ChatError(f"{key}.tool_calls[{j}].index is {c.index}: a streamed call's "
                                f"index is its place in the list ({j}).",
                                f"{key}.tool_calls[{j}].index")
        given = {"tool_calls": [c.model_dump(exclude_none=True, exclude={"index"})
                                for c in m.tool_calls or []]}
        try:
            calls = T.message_calls(given, key, role, False, None)
        except T.ToolError as e:
            raise ChatError(f"{e.why}.", e.key) from None
        if m.content is None and not calls:
            raise ChatError(f"{key}.content: it is null, which only an assistant turn that calls "
                            "tools may send; give the text.", f"{key}.content")
        msg = {"role": role, "content": m.text()}
        if calls:
            msg["tool_calls"] = calls
        for k in ("tool_call_id", "name") if role == "tool" else ():
            if getattr(m, k):
                msg[k] = getattr(m, k)
        out.append(msg)
    try:
        T.link_results(out, "messages", calls_as_text=False)   # OpenAI's rule: a tool message
        # answers a call of the assistant message before it
    except T.ToolError as e:
        raise ChatError(f"{e.why}.", e.key) from None
    if system_prompt and not any(m["role"] == "system" for m in out):
        # what training added where a record had no system turn: the slot's default (slots.py)
        out.insert(0, {"role": "system", "content": system_prompt})
    return out


def _tools(req: ChatRequest) -> list[dict] | None:
    if not req.tools:
        return None
    try:
        return T.normalize_tools(req.tools, "tools")
    except T.ToolError as e:
        raise ChatError(f"{e.why}.", e.key) from None


def build(slots, slot, req: ChatRequest, counts: Counts) -> Prompt:
    msgs = messages(req, slot.system_prompt)
    tools, choice = _tools(req), req.tool_choice
    if choice not in (None, "none") and not tools:
        raise ChatError("tool_choice: it is only allowed when tools are given.", "tool_choice")
    name = choice.function.name if isinstance(choice, NamedToolChoice) else None
    if name is not None and name not in T.tool_names(tools):
        raise ChatError(f"tool_choice: it names {name!r}, which is not in `tools` "
                        f"({', '.join(sorted(T.tool_names(tools)))}).", "tool_choice")
    shown = tools if choice != "none" else None
    reader = None
    if shown:
        if slots.chat is None:
            raise ChatError("tools: the served model has no chat template, so it cannot be shown "
                            "tools; serve a run whose template renders them (or one trained with "
                            "data.tool_format=hermes).", "tools")
        syntax = slots.chat.tool_syntax
        if syntax is None:
            why = "writes tool calls in no syntax mens can read back (hermes, llama3, mistral)" \
                if slots.chat.template.renders_tools() else "cannot render tools"
            raise ChatError(f"tools: the served model's chat template ({slots.chat.origin}) "
                            f"{why}, so no call could be answered; train the run with "
                            "data.tool_format=hermes (its spec.yaml tells the server).", "tools")
        reader = Reader(syntax, counts, choice == "required", name, req.parallel_tool_calls,
                        T.tool_names(tools))   # a call to any other name is content (#49)
    try:
        text = slots.prompt_text(msgs, shown)
    except DataError as e:   # e.g. the template cannot render tools (mens.data.tool_turns)
        param = "tools" if shown and e.key == "data.tool_format" else "messages"
        tail = " (the served run's spec.yaml decides data.tool_format)" \
            if e.key == "data.tool_format" else ""
        raise ChatError(f"{param}: {e.message}{tail}", param) from None
    except Exception as e:   # a template may refuse a conversation; no template at all
        raise ChatError(f"messages: they cannot be rendered: {e}", "messages") from None
    try:
        ids = slots.encode(text)
    except Exception as e:   # lone surrogates
        raise ChatError(f"messages: they cannot be tokenized: {e}", "messages") from None
    forced = opening(slots, msgs, shown, text, ids, name) if reader and reader.required else []
    return Prompt(ids + forced, len(forced), reader)


def opening(slots, msgs: list[dict], tools, text: str, ids: list[int],
            name: str | None) -> list[int]:
    """The token ids that open a call (to `name`, or to any function) in the template's own
    syntax, right after the generation prompt: a probe call rendered after the conversation,
    cut before its name (or its arguments), at a token boundary of the whole render."""
    chat = slots.chat
    probe = {"id": "a1b2c3d4e", "type": "function",   # 9 characters: Mistral's templates check
             "function": {"name": name or _NAME, "arguments": {_ARG: 1}}}
    why = None
    try:
        full = chat.template.render_spans(
            [*msgs, {"role": "assistant", "content": "", "tool_calls": [probe]}],
            chat.options, tools).text
    except Exception as e:   # noqa: BLE001 - a template that refuses the probe: nothing forced
        full, why = "", f"the template does not render a call here ({e})"
    answer = full[len(text):] if full.startswith(text) else None
    cut = -1
    if answer is not None:
        at = answer.find(_NAME if name is None else _ARG)
        cut = at if name is None or at < 0 else answer.rfind("{", 0, at)
    if cut <= 0:
        _say(why or "the rendered call does not continue the prompt")
        return []
    backend = getattr(slots.request_tokenizer, "backend_tokenizer", slots.request_tokenizer)
    try:
        enc = backend.encode(full, add_special_tokens=False)
    except Exception as e:   # noqa: BLE001 - e.g. a lone surrogate in the function's name
        _say(f"the rendered call cannot be tokenized ({e})")
        return []
    if list(enc.ids[:len(ids)]) != ids:
        _say("the prompt's last token merges with the call's opening")
        return []
    stop = len(text) + cut
    forced = []
    for tid, (_, end) in zip(enc.ids[len(ids):], enc.offsets[len(ids):]):
        if end > stop:
            break
        forced.append(tid)
    return forced


def _say(why: str) -> None:
    print(f"mens: note: tool_choice: the call's opening is not forced ({why}); the answer is "
          "only validated", file=sys.stderr, flush=True)
