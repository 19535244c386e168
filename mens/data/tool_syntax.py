"""Each family's native tool-call syntax: which one a chat template writes, how to read calls back
out of a model's text (serving, evaluation), and the Hermes rendering for templates that have
none (`data.tool_format=hermes`).

    hermes   Qwen2.5 / Qwen3 / Hermes / mens's tiny rung:
             <tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>   (one block per call)
    llama3   Llama 3.1 / 3.2 / 3.3: the whole answer is {"name": …, "parameters": {…}}
             (after an optional <|python_tag|>), one call per turn
    mistral  Mistral v0.3: [TOOL_CALLS] [{"name": …, "arguments": {…}, "id": …}, …]; the newer
             [TOOL_CALLS]name[ARGS]{…} (tokenizer v11+) is read too
The syntax is told from the template's own text (what it writes is what the model learned), as
vLLM's and llama.cpp's parsers are chosen per template. A text that does not parse is content —
never an error: `parse` says `malformed` so a server answers it as plain text with status 200.
No torch.
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
    args = obj.get(args_key, obj.get("arguments", obj.get("parameters", {})))
    if isinstance(args, str):
        args = _json(args)
    if not isinstance(args, dict):
        return None
    out = {"type": "function", "function": {"name": obj["name"], "arguments": args}}
    if isinstance(obj.get("id"), str):
        out["id"] = obj["id"]
    return out


def _json(text: str):
    try:
        return json.loads(text)
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
        calls = []
        for part in body.split("[TOOL_CALLS]"):
            name, _, args = part.partition("[ARGS]")
            calls.append(_call({"name": name.strip(), "arguments": _json(args.strip())}))
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
