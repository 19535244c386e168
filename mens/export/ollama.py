"""The data Ollama hands a Modelfile TEMPLATE for an OpenAI chat request, as Go values.

Ollama's OpenAI layer and template package (ollama/ollama: openai/openai.go FromChatRequest,
FromCompletionToolCall; template/template.go Execute, collate, convertMessagesForTemplate,
convertToolsForTemplate; api/types.go) turn a request into:
  .System    every system message's content, joined with "\\n\\n"
  .Messages  the messages, consecutive ones of one role (but tool) merged with "\\n\\n" (collate):
             .Role .Content .ToolName .ToolCallID, .ToolCalls [{.ID, .Function{.Index .Name
             .Arguments}}] where Arguments is a Go map (sorted keys; JSON numbers are float64)
             that prints as its compact JSON
  .Tools     nil without tools, else [{.Type .Function{.Name .Description .Parameters{.Type
             .Required .Properties}}}]: the schema as Ollama's structs keep it — properties a
             sorted map of {type, description, enum, items, …}; JSON-schema keys Ollama has no
             field for (default, minimum, format, additionalProperties …) are gone before any
             template sees them.
What a TEMPLATE can write is bounded by this: it is why the Modelfile check (mens/export/
modelfile.py) probes with schemas Ollama keeps whole and says so in the export's notes.
"""
from __future__ import annotations

import json

from mens.export.govalues import GoList, GoMap, GoOrderedMap, GoStruct, PropertyType

_PROP_JSON = [("anyOf", "AnyOf", True), ("type", "Type", True), ("items", "Items", True),
              ("description", "Description", True), ("enum", "Enum", True),
              ("properties", "Properties", True), ("required", "Required", True)]


def _any(v):
    """A JSON value as Go's json.Unmarshal into `any` makes it: float64 numbers, maps, slices."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, dict):
        return GoMap({k: _any(x) for k, x in v.items()})
    return GoList(_any(x) for x in v)


def _prop(p: dict) -> GoStruct:
    t = p.get("type")
    nested = p.get("properties")
    return GoStruct({
        "AnyOf": GoList(_prop(x) for x in p.get("anyOf") or []),
        "Type": PropertyType([t] if isinstance(t, str) else t or []),
        "Items": _any(p.get("items")), "Description": p.get("description") or "",
        "Enum": _any(p.get("enum")) if p.get("enum") else None,
        "Properties": GoOrderedMap({k: _prop(x) for k, x in nested.items()}) if nested else None,
        "Required": list(p.get("required") or [])}, json=_PROP_JSON)


def tools_value(tools: list[dict] | None):
    """convertToolsForTemplate(api.Tools parsed from the request's `tools`)."""
    if not tools:
        return None
    out = GoList(stringer=True)
    for t in tools:
        fn = t.get("function") or {}
        ps = fn.get("parameters") or {}
        params = GoStruct({
            "Type": ps.get("type") or "", "Defs": _any(ps.get("$defs")),
            "Items": _any(ps.get("items")), "Required": list(ps.get("required") or []),
            "Properties": None if "properties" not in ps else GoMap(
                {k: _prop(v) for k, v in ps["properties"].items()}, stringer=True)},
            json=[("type", "Type", False), ("$defs", "Defs", True), ("items", "Items", True),
                  ("required", "Required", True), ("properties", "Properties", False)])
        func = GoStruct({"Name": fn.get("name") or "", "Description": fn.get("description") or "",
                         "Parameters": params},
                        json=[("name", "Name", False), ("description", "Description", False),
                              ("parameters", "Parameters", False)])
        out.append(GoStruct({"Type": t.get("type") or "", "Items": _any(t.get("items")),
                             "Function": func},
                            json=[("type", "Type", False), ("items", "Items", True),
                                  ("function", "Function", False)], stringer=True))
    return out


def _args(a) -> GoMap:
    if isinstance(a, str):
        a = json.loads(a)
    return GoMap({k: _any(v) for k, v in (a or {}).items()}, stringer=True)


def messages_value(messages: list[dict]) -> tuple[str, GoList]:
    """(.System, .Messages): FromChatRequest, then collate, then convertMessagesForTemplate."""
    api = []
    for m in messages:
        if not isinstance(m.get("content") or "", str):
            raise ValueError("the Ollama model here takes string contents only")
        name = m.get("name") or ""
        if m["role"] == "tool" and not name and m.get("tool_call_id"):
            name = next((c["function"]["name"] for x in messages for c in x.get("tool_calls") or []
                         if c.get("id") == m["tool_call_id"]), "")
        api.append({"Role": m["role"], "Content": m.get("content") or "",
                    "ToolCalls": [(c.get("id") or "", c["function"]) for c in
                                  m.get("tool_calls") or []],
                    "ToolName": name if m["role"] == "tool" else "",
                    "ToolCallID": m.get("tool_call_id") or ""})
    system = "\n\n".join(m["Content"] for m in api if m["Role"] == "system")
    collated: list[dict] = []
    for m in api:                     # merge a run of one role's messages (never tool results)
        if collated and collated[-1]["Role"] == m["Role"] and m["Role"] != "tool":
            collated[-1]["Content"] += "\n\n" + m["Content"]
        else:
            collated.append(dict(m))
    out = GoList()
    for m in collated:
        calls = GoList(GoStruct({"ID": i, "Function": GoStruct({
            "Index": 0, "Name": f["name"], "Arguments": _args(f.get("arguments"))})})
            for i, f in m["ToolCalls"])
        out.append(GoStruct({"Role": m["Role"], "Content": m["Content"], "Thinking": "",
                             "Images": GoList(), "ToolCalls": calls,
                             "ToolName": m["ToolName"], "ToolCallID": m["ToolCallID"]}))
    return system, out


def values(messages: list[dict], tools: list[dict] | None = None) -> GoMap:
    """The map Template.Execute passes a messages-style TEMPLATE."""
    system, msgs = messages_value(messages)
    return GoMap({"System": system, "Messages": msgs, "Tools": tools_value(tools),
                  "Response": "", "Think": False, "ThinkLevel": "", "IsThinkSet": False})
