"""Each family's native tool-call syntax: which one a chat template writes, how to read calls back
out of a model's text (serving, evaluation), and the Hermes rendering for templates that have
none (`data.tool_format=hermes`).

    hermes   Qwen2.5 / Qwen3 / Hermes / mens's tiny rung:
             <tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>   (one block per call)
    llama3   Llama 3.1 / 3.2 / 3.3: the whole answer is {"name": …, "parameters": {…}}
             (after an optional <|python_tag|>), one call per turn
    mistral  Mistral v0.3: [TOOL_CALLS] [{"name": …, "arguments": {…}, "id": …}, …]; the newer
             [TOOL_CALLS]name[ARGS]{…} (tokenizer v11+) and [TOOL_CALLS]name[CALL_ID]id[ARGS]{…}
             (v13: the call's id between its name and its arguments) are read too
The syntax is told from the template's own text (what it writes is what the model learned), as
vLLM's and llama.cpp's parsers are chosen per template. A text that does not parse is content —
never an error: `parse` says `malformed` so a server answers it as plain text with status 200.
A call is a name AND an arguments object the text holds: `{"name": "Alice", "age": 31}` is an
answer, not a call to "Alice" with `{}` (issue #49); arguments must be JSON — `NaN` and
`Infinity`, which Python's json reads, are not, and make the call malformed (a client's
JSON.parse would fail on them). No torch.
"""
from __future__ import annotations

import json
import re
from typing import NamedTuple

from mens.data.tools import call_text

SYNTAXES = ("hermes", "llama3", "mistral")
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
# the tool block the tiny rung's template and data.tool_format=hermes write into the system turn
# (Qwen2.5's and Qwen3's words, so a Qwen model sees what it was trained with)
HERMES_PREAMBLE = ("# Tools\n\nYou may call one or more functions to assist with the user query."
                   "\n\nYou are provided with function signatures within <tools></tools> XML "
                   "tags:\n<tools>")
HERMES_POSTAMBLE = ("\n</tools>\n\nFor each function call, return a json object with function name "
                    "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def syntax_of(template_source: str) -> str | None:
    """The call syntax a chat template writes, or None when it renders no tool calls."""
    if "<tool_call>" in template_source:
        return "hermes"
    if "[TOOL_CALLS]" in template_source:
        return "mistral"
    if '"parameters": ' in template_source and "tool_call" in template_source:
        return "llama3"
    return None


class Parsed(NamedTuple):
    content: str            # the text that is not a call (the whole text when malformed)
    calls: list[dict]       # [{"type": "function", "function": {"name", "arguments": {…}}}]
    malformed: str | None   # why a call-looking text did not parse (then calls == [])


def _call(obj, args_key: str = "arguments") -> dict | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    # no arguments object at all: not a call (a JSON answer that happens to hold a "name")
    args = next((obj[k] for k in (args_key, "arguments", "parameters") if k in obj), None)
    if isinstance(args, str):
        args = _json(args)
    if not isinstance(args, dict):
        return None
    out = {"type": "function", "function": {"name": obj["name"], "arguments": args}}
    if isinstance(obj.get("id"), str):
        out["id"] = obj["id"]
    return out


def _not_json(word: str):
    raise ValueError(f"{word} is not JSON")


def _json(text: str):
    try:   # parse_constant: NaN, Infinity, -Infinity (Python's extension) are refused
        return json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError):   # not JSON, or nested past the parser's depth
        return None


def _hermes(text: str) -> Parsed:
    blocks = list(_HERMES.finditer(text))
    opened = text.count("<tool_call>")
    if not blocks and not opened:
        return Parsed(text, [], None)
    calls = [_call(_json(b.group(1))) for b in blocks]
    if opened != len(blocks) or not all(calls):
        why = "a <tool_call> block is not closed" if opened != len(blocks) else \
            "a <tool_call> block does not hold {\"name\", \"arguments\"} JSON"
        return Parsed(text, [], why)
    content = _HERMES.sub("", text).strip()
    return Parsed(content, calls, None)


def _llama3(text: str) -> Parsed:
    body = text.strip()
    if body.startswith("<|python_tag|>"):
        body = body[len("<|python_tag|>"):].strip()
    if not body.startswith("{"):
        return Parsed(text, [], None)
    obj = _json(body)
    call = _call(obj, "parameters")
    if call is None:
        return Parsed(text, [], "the answer opens like a JSON call but is not "
                                "{\"name\", \"parameters\"}")
    return Parsed("", [call], None)


def _mistral(text: str) -> Parsed:
    marker = text.find("[TOOL_CALLS]")
    head, body = (text[:marker], text[marker + len("[TOOL_CALLS]"):]) if marker >= 0 \
        else ("", text)
    body = body.strip()
    if marker < 0 and not body.startswith('[{"name"'):   # the marker decoded away (a special token)
        return Parsed(text, [], None)
    if "[ARGS]" in body:     # v11+: name[ARGS]{…}, repeated after further [TOOL_CALLS] markers
        calls = []           # v13: name[CALL_ID]id[ARGS]{…}
        for part in body.split("[TOOL_CALLS]"):
            head_, _, args = part.partition("[ARGS]")
            name, marked, cid = head_.partition("[CALL_ID]")
            obj = {"name": name.strip(), "arguments": _json(args.strip())}
            calls.append(_call(obj | ({"id": cid.strip()} if marked else {})))
    else:
        obj = _json(body)
        calls = [_call(c) for c in obj] if isinstance(obj, list) and obj else [None]
    if not all(calls):
        return Parsed(text, [], "[TOOL_CALLS] is not followed by a JSON list of "
                                "{\"name\", \"arguments\"}")
    return Parsed(head.strip(), calls, None)


def parse(text: str, syntax: str | None) -> Parsed:
    """Calls read out of a model's answer in `syntax` (None: no calls, all content)."""
    if syntax is None:
        return Parsed(text, [], None)
    return {"hermes": _hermes, "llama3": _llama3, "mistral": _mistral}[syntax](text)


# ---- Hermes rendering for templates without tools (data.tool_format=hermes) ---------------------
def hermes_messages(messages: list[dict], tools: list[dict] | None
                    ) -> tuple[list[dict], dict[int, list[dict]]]:
    """Messages a tool-less template can render: the schemas appended to the system turn (one
    is added when there is none), each call written as a <tool_call> block after the assistant's
    content, and tool results as a user turn of <tool_response> blocks (consecutive results in one
    turn, as Qwen2.5 writes them) — so user and assistant turns still alternate. Returns the
    messages and {index of a turn now holding calls as text: those calls}."""
    out: list[dict] = []
    called: dict[int, list[dict]] = {}
    if tools:
        schema = HERMES_PREAMBLE + "".join("\n" + json.dumps(t, ensure_ascii=False)
                                           for t in tools) + HERMES_POSTAMBLE
        if messages and messages[0]["role"] == "system":
            out.append({**messages[0], "content": messages[0]["content"] + "\n\n" + schema})
            messages = messages[1:]
        else:
            out.append({"role": "system", "content": schema})
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            blocks = [f"<tool_call>\n{call_text(c)}\n</tool_call>" for c in m["tool_calls"]]
            text = "\n".join(([m["content"]] if m["content"] else []) + blocks)
            called[len(out)] = m["tool_calls"]
            out.append({k: v for k, v in m.items() if k != "tool_calls"} | {"content": text})
        elif m["role"] == "tool":
            block = f"<tool_response>\n{m['content']}\n</tool_response>"
            if out and out[-1].get("_results"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_results": True})
        else:
            out.append(dict(m))
    return [{k: v for k, v in m.items() if k != "_results"} for m in out], called
