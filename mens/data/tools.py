"""Tool calls as structure, from the user's data to the chat template (issue #38).

A chat record that uses tools keeps them as OpenAI messages do, never flattened into text:
    {"messages": [..., {"role": "assistant", "content": "", "tool_calls": [
                          {"id": "…", "type": "function",
                           "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                       {"role": "tool", "tool_call_id": "…", "name": "get_weather", "content": "…"},
                       ...],
     "tools": [{"type": "function", "function": {"name", "description", "parameters"}}]}
This is the form `apply_chat_template(messages, tools=…)` takes, so each family's own template
writes the calls in its own syntax (Qwen's <tool_call> JSON, Llama 3.1's JSON object, Mistral's
[TOOL_CALLS]). What is normalised, and why:
  * `arguments` become an object: OpenAI sends a JSON string, most templates `tojson` the value
    (a string would be written twice-quoted), and one canonical spelling means one thing to learn.
  * a tool-call turn's null `content` becomes "" (Qwen3's template tests `'</think>' in content`).
  * a tool's schema in the bare form {name, description, parameters} (ShareGPT/LLaMA-Factory,
    `data.tools` files) is wrapped as OpenAI's {"type": "function", "function": …}.
  * a call without an id gets a stable 9-character one (Mistral's template demands them), and a
    tool turn without `tool_call_id` gets the id of the call it answers.
Every problem is a formats.Bad naming the field; the caller adds file:line (exit 2), or skips and
counts the record under `data.on_bad=skip`. No torch.
"""
from __future__ import annotations

import hashlib
import json


class ToolError(ValueError):
    """A tool-call problem in one record: `key` names the field (formats turns it into Bad)."""

    def __init__(self, key: str, why: str):
        super().__init__(why)
        self.key, self.why = key, why


def _loads(v, key: str, what: str):
    if not isinstance(v, str):
        return v
    try:
        return json.loads(v)
    except json.JSONDecodeError as e:
        raise ToolError(key, f"`{key}` is not valid JSON ({e.msg} at column {e.colno}): {what} "
                             f"must be a JSON object or a string holding one") from None


def normalize_tools(v, key: str = "tools") -> list[dict]:
    """A record's (or `data.tools`') schemas → OpenAI's [{"type": "function", "function": …}].
    Accepts a JSON string of the list (ShareGPT's `tools` column) and bare {name, …} entries."""
    v = _loads(v, key, "the tool list")
    if isinstance(v, dict):
        v = [v]
    if not isinstance(v, list):
        raise ToolError(key, f"`{key}` must be a list of tool schemas, not {type(v).__name__}")
    out, seen = [], set()
    for i, t in enumerate(v):
        k = f"{key}[{i}]"
        if not isinstance(t, dict):
            raise ToolError(k, f"`{k}` must be an object (a tool schema)")
        fn = t.get("function") if t.get("type", "function") == "function" and "function" in t \
            else t
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ToolError(f"{k}.function.name" if "function" in t else f"{k}.name",
                            f"`{k}` has no function name: a tool schema is "
                            '{"type": "function", "function": {"name", "description", '
                            '"parameters"}} (or the bare {"name", …})')
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise ToolError(f"{k}.parameters", f"`{k}.parameters` must be a JSON schema object")
        if fn["name"] in seen:
            raise ToolError(k, f"`{k}`: the tool {fn['name']!r} is listed twice")
        seen.add(fn["name"])
        out.append({"type": "function", "function": dict(fn)})
    return out


def tool_names(tools: list[dict] | None) -> set[str]:
    return {t["function"]["name"] for t in tools or []}


def normalize_call(c, key: str, names: set[str] | None) -> dict:
    """One call → {"id"?, "type": "function", "function": {"name", "arguments": {…}}}. A call
    may be OpenAI's ({"function": {"name", "arguments"}}) or bare ({"name", "arguments"})."""
    c = _loads(c, key, "a tool call")
    if not isinstance(c, dict):
        raise ToolError(key, f"`{key}` must be an object with a function name and arguments")
    fn = c.get("function") if isinstance(c.get("function"), dict) else c
    fk = f"{key}.function" if fn is not c else key
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ToolError(f"{fk}.name", f"`{fk}.name` is missing: a call names its function")
    if names is not None and name not in names:
        known = ", ".join(sorted(names)) or "none"
        raise ToolError(f"{fk}.name", f"`{fk}.name` calls {name!r}, which is not in the record's "
                                      f"`tools` ({known}); add its schema or fix the name")
    args = fn.get("arguments", fn.get("parameters", {}))
    args = _loads(args, f"{fk}.arguments", "arguments")
    if not isinstance(args, dict):
        raise ToolError(f"{fk}.arguments", f"`{fk}.arguments` must be a JSON object, not "
                                           f"{type(args).__name__}")
    out = {"type": "function", "function": {"name": name, "arguments": args}}
    if isinstance(c.get("id"), str) and c["id"]:
        out = {"id": c["id"], **out}
    return out


def normalize_calls(v, key: str, names: set[str] | None) -> list[dict]:
    v = _loads(v, key, "the tool calls")
    if isinstance(v, dict):
        v = [v]
    if not isinstance(v, list) or not v:
        raise ToolError(key, f"`{key}` must be a non-empty list of tool calls")
    return [normalize_call(c, f"{key}[{j}]", names) for j, c in enumerate(v)]


def message_calls(m: dict, key: str, role: str, sharegpt_call: bool, names) -> list[dict]:
    """The tool calls one message makes ([] for none); calls on a non-assistant turn are refused.
    sharegpt_call: a ShareGPT `function_call` turn, whose value is the call(s) (LLaMA-Factory)."""
    if sharegpt_call:
        return normalize_calls(m.get("value"), f"{key}.value", names)
    given = [k for k in ("tool_calls", "function_call") if m.get(k)]
    if given and role != "assistant":
        raise ToolError(f"{key}.{given[0]}", f"`{key}` is a {role} turn with `{given[0]}`: only "
                                             f"assistant turns call tools")
    if m.get("tool_calls"):
        return normalize_calls(m["tool_calls"], f"{key}.tool_calls", names)
    if m.get("function_call"):   # OpenAI's legacy single call
        return normalize_calls([m["function_call"]], f"{key}.function_call", names)
    return []


def call_id(turn: int, j: int, call: dict) -> str:
    """A call's id where the data gives none: 9 characters of [0-9a-f], derived from its place
    and content (stable across runs) — Mistral's template refuses other ids (it checks length 9,
    as vLLM's Mistral parser writes them); other families' templates do not render ids."""
    blob = json.dumps([turn, j, call["function"]], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:9]


def link_results(msgs: list[dict], key: str, calls_as_text: bool = True) -> None:
    """Every tool turn answers a call of the assistant turn before it (by `tool_call_id`, else by
    `name`, else in order); it takes that call's id when it has none, and a call without an id
    gets one (call_id). Raises ToolError for a tool turn that answers no call — unless the
    record makes no structured call at all and the turn names no call id (tool use written as
    text; calls_as_text=False refuses that too, as OpenAI's API does). Mutates msgs."""
    pending: list[dict] = []
    # a record with no structured call writes its calls as text in `content` (mens's corpora
    # before issue #38, many users' data): its tool turns answer those and train as text
    structured = not calls_as_text or any(m.get("tool_calls") for m in msgs)
    for i, m in enumerate(msgs):
        role = m["role"]
        if role == "assistant":
            for j, c in enumerate(m.get("tool_calls") or []):
                if not c.get("id"):
                    m["tool_calls"][j] = {"id": call_id(i, j, c), **c}
            pending = list(m.get("tool_calls") or [])
            continue
        if role != "tool":
            pending = []
            continue
        rid, name = m.get("tool_call_id"), m.get("name")
        if not structured and rid is None:
            continue
        if rid is not None:
            hit = next((c for c in pending if c.get("id") == rid), None)
            why = f"its tool_call_id {rid!r} matches no call of the assistant turn before it"
        elif name is not None:
            hit = next((c for c in pending if c["function"]["name"] == name), None)
            why = f"it names {name!r}, which the assistant turn before it did not call"
        else:
            hit = pending[0] if pending else None
            why = "the assistant turn before it made no (more) calls"
        if hit is None:
            shown = [c["function"]["name"] for c in pending]
            raise ToolError(f"{key}[{i}]", f"`{key}[{i}]` is a tool result that answers no call: "
                                           f"{why} (open calls: {shown or 'none'})")
        pending.remove(hit)
        if rid is None and hit.get("id"):
            m["tool_call_id"] = hit["id"]


def count_calls(msgs: list[dict]) -> int:
    return sum(len(m.get("tool_calls") or []) for m in msgs)


def call_text(call: dict) -> str:
    """The Hermes/Qwen spelling of one call's body (`data.tool_format=hermes`, the tiny rung)."""
    fn = call["function"]
    return json.dumps({"name": fn["name"], "arguments": fn["arguments"]}, ensure_ascii=False)
