"""One user record (any supported format) → mens's record, and the one place that tells a
record's kind.

mens's records come in four kinds (`kind()`; the only code in mens that looks at a record's keys
to decide — tests/data/test_records.py scans mens/ for any other):
    chat   {"messages": [{"role", "content"}, …]}
    pair   {"prompt", "chosen", "rejected"}   message lists (a DPO preference pair)
    labeled {"prompt", "completion", "label"}  messages + desirable or not (KTO; `unpair()`)
    text   {"text"}                            continued pre-training

Input formats, each registered once in FORMATS with its `detect` and `normalize` (detected from the
record's keys, after `data.columns` renames them, unless `data.format` says which):
    messages           {"messages": [{"role", "content"}, …]}               OpenAI chat
    sharegpt           {"conversations": [{"from", "value"}, …]}             ShareGPT
    alpaca             {"instruction", "input"?, "output", "system"?}        Alpaca
    prompt_completion  {"prompt", "completion"}                              strings or messages
    text               {"text"}                                              continued pre-training
    preference         {"prompt"?, "chosen", "rejected"}                     DPO (TRL's forms)
    labeled            {"prompt", "completion", "label": bool}               KTO (TRL's unpaired form)
Every problem is a `Bad(key, why)`: the caller adds file:line and raises DataError. No torch.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Literal

from mens.data import tools as T

Kind = Literal["chat", "pair", "labeled", "text"]
ROLES = ("system", "user", "assistant", "tool")
SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant",
                  "assistant": "assistant", "tool": "tool", "function_call": "assistant",
                  "observation": "tool", "function": "tool"}
SHAREGPT_CALLS = ("function_call",)   # ShareGPT turns whose value is a call's JSON (LLaMA-Factory)


def kind(rec: dict) -> Kind:
    """A mens record's kind. A pair is told by its `prompt` (a chat keeps its prompt inside
    `messages`), so a corpus pair that lacks `chosen` is reported as that, not as a chat without
    `messages`; a text by its `text`."""
    if "prompt" in rec:
        return "labeled" if "label" in rec else "pair"
    return "text" if "text" in rec else "chat"


def turns(rec: dict, answer: str = "chosen") -> list[dict]:
    """The conversation a record holds: a chat's messages, a pair's prompt + its `answer`
    ("chosen" or "rejected"), a labeled record's prompt + completion. A text record has none; synthesis reads records still being
    written, so a missing list is empty too."""
    k = kind(rec)
    if k == "pair":
        return [*(rec.get("prompt") or []), *(rec.get(answer) or [])]
    if k == "labeled":
        return [*(rec.get("prompt") or []), *(rec.get("completion") or [])]
    return (rec.get("messages") or []) if k == "chat" else []


def answers(rec: dict) -> list[dict]:
    """The turns that answer: a pair's chosen answer, or all of a chat's turns (callers keep its
    assistant turns); [] where a (partial) record has none."""
    k = kind(rec)
    if k == "labeled":
        return rec.get("completion") or []
    return (rec.get("chosen") or []) if k == "pair" else chat(rec)


def chat(rec: dict) -> list[dict]:
    """A chat record's messages as they are; [] for a pair, a text, or a record without any."""
    return rec.get("messages", []) if kind(rec) == "chat" else []


class Bad(Exception):
    """A record that does not fit its format: `key` names the field."""

    def __init__(self, key: str, why: str):
        super().__init__(why)
        self.key, self.why = key, why


def rename(rec: dict, columns: dict) -> dict:
    """`data.columns` maps mens's field name to the data's column: {"instruction": "question"}."""
    if not columns:
        return rec
    out = {k: v for k, v in rec.items() if k not in columns.values()}
    for ours, theirs in columns.items():
        if theirs in rec:
            out[ours] = rec[theirs]
    return out


def _text(rec: dict, key: str) -> str:
    v = rec.get(key)
    if not isinstance(v, str):
        raise Bad(key, f"`{key}` must be a string, not {type(v).__name__}"
                  if key in rec else f"missing field `{key}`")
    return v


def _messages(v, key: str, roles: dict | None = None, names: set | None = None) -> list[dict]:
    """A list of {role, content} (or ShareGPT {from, value} when `roles` maps them). Tool use is
    kept as structure (mens.data.tools): an assistant turn's `tool_calls` (or the legacy
    `function_call`; ShareGPT's `function_call` turn, whose value is the call's JSON), a tool
    turn's `tool_call_id`/`name`. `names`: the record's tools, which every call must name."""
    if not isinstance(v, list) or not v:
        raise Bad(key, f"`{key}` must be a non-empty list of messages")
    out = []
    for i, m in enumerate(v):
        rk, ck = ("from", "value") if roles else ("role", "content")
        if not isinstance(m, dict) or rk not in m:
            raise Bad(f"{key}[{i}]", f"`{key}[{i}]` must be an object with `{rk}` and `{ck}`")
        role = roles.get(m[rk]) if roles else m[rk]
        if role not in ROLES:
            known = ", ".join(sorted(roles) if roles else ROLES)
            raise Bad(f"{key}[{i}].{rk}", f"`{key}[{i}].{rk}` is {m[rk]!r}; it must be one of "
                                         f"{known}")
        sharegpt_call = bool(roles) and m[rk] in SHAREGPT_CALLS
        try:
            calls = T.message_calls(m, f"{key}[{i}]", role, sharegpt_call, names)
        except T.ToolError as e:
            raise Bad(e.key, e.why) from None
        content = "" if calls and (sharegpt_call or m.get(ck) is None) else m.get(ck)
        if role == "tool" and isinstance(content, (dict, list)):
            content = json.dumps(content, ensure_ascii=False)   # a result given as an object
        if not isinstance(content, str):
            raise Bad(f"{key}[{i}].{ck}", f"`{key}[{i}].{ck}` must be a string")
        msg = {"role": role, "content": content}
        if calls:
            msg["tool_calls"] = calls
        if role == "tool":
            for k in ("tool_call_id", "name"):
                if isinstance(m.get(k), str) and m[k]:
                    msg[k] = m[k]
        if isinstance(m.get("reasoning_content"), str) and m["reasoning_content"]:
            msg["reasoning_content"] = m["reasoning_content"]
        out.append(msg)
    try:
        T.link_results(out, key)
    except T.ToolError as e:
        raise Bad(e.key, e.why) from None
    return out


def _tools(rec: dict) -> tuple[dict, set | None]:
    """({"tools": [...]} or {}, the tool names calls must use, or None when the record lists no
    tools — its calls are then trained as they are, unchecked)."""
    if rec.get("tools") in (None, "", []):
        return {}, None
    try:
        tools = T.normalize_tools(rec["tools"])
    except T.ToolError as e:
        raise Bad(e.key, e.why) from None
    return {"tools": tools}, T.tool_names(tools)


def tool_calls(rec: dict) -> int:
    """How many tool calls a (normalised) record holds: every turn of a chat, a pair's prompt and
    both answers, a labelled record's prompt and completion."""
    msgs = [m for k in ("messages", "prompt", "chosen", "rejected", "completion")
            if isinstance(rec.get(k), list) for m in rec[k]]
    return T.count_calls(msgs)


def check_turns(msgs: list[dict], key: str, need_answer: bool = True) -> None:
    """An optional leading system turn, then user and assistant turns alternating (tool results
    sit between an assistant turn and the next assistant turn)."""
    prev = None
    for i, m in enumerate(msgs):
        role = m["role"]
        if role == "system":
            if i != 0:
                raise Bad(f"{key}[{i}].role", f"`{key}[{i}]` is a system turn after the first "
                                              f"message: a system prompt must come first")
        elif role == "user" and prev == "user" or role == "assistant" and prev == "assistant" \
                or role == "tool" and prev not in ("assistant", "tool") \
                or role == "assistant" and prev in (None, "system"):
            raise Bad(f"{key}[{i}].role",
                      f"roles do not alternate: `{key}[{i}]` is {role} after "
                      f"{prev or 'the start'} (expected user and assistant turns in turn, "
                      f"starting with user)")
        prev = role
    if need_answer and not any(m["role"] == "assistant" for m in msgs):
        raise Bad(key, f"`{key}` has no assistant turn: nothing to learn from")


def _with_system(msgs: list[dict], system: str | None) -> list[dict]:
    if system and msgs and msgs[0]["role"] != "system":
        return [{"role": "system", "content": system}] + msgs
    return msgs


def _as_messages(v, key: str, role: str, names: set | None = None) -> list[dict]:
    return [{"role": role, "content": v}] if isinstance(v, str) else \
        _messages(v, key, names=names)


def _alpaca(rec: dict, names: set | None = None) -> list[dict]:
    inp = rec.get("input") or ""
    if not isinstance(inp, str):
        raise Bad("input", "`input` must be a string")
    user = _text(rec, "instruction") + (f"\n\n{inp}" if inp.strip() else "")
    msgs = [{"role": "user", "content": user},
            {"role": "assistant", "content": _text(rec, "output")}]
    if isinstance(rec.get("system"), str) and rec["system"]:
        msgs.insert(0, {"role": "system", "content": rec["system"]})
    return msgs


def _prompt_completion(rec: dict, names: set | None = None) -> list[dict]:
    for k in ("prompt", "completion"):
        if k not in rec:
            raise Bad(k, f"missing field `{k}`")
    return _as_messages(rec["prompt"], "prompt", "user", names) + \
        _as_messages(rec["completion"], "completion", "assistant", names)


def _plain(rec: dict, system: str | None) -> dict:
    # a system prompt has no place in plain text: `system` is ignored
    text = _text(rec, "text")
    if not text.strip():
        raise Bad("text", "`text` is empty")
    return {"text": text}


def _pair(rec: dict, system: str | None) -> dict:
    """TRL's preference forms: explicit prompt (string or messages) with chosen/rejected
    (strings or assistant messages), or chosen/rejected as whole chats sharing the prompt."""
    for k in ("chosen", "rejected"):
        if k not in rec:
            raise Bad(k, f"missing field `{k}`")
    extra, names = _tools(rec)
    if "prompt" in rec:
        prompt = _as_messages(rec["prompt"], "prompt", "user", names)
        chosen = _as_messages(rec["chosen"], "chosen", "assistant", names)
        rejected = _as_messages(rec["rejected"], "rejected", "assistant", names)
    else:                       # implicit prompt: the shared prefix of two whole chats
        c = _messages(rec["chosen"], "chosen", names=names)
        r = _messages(rec["rejected"], "rejected", names=names)
        if len(c) < 2 or c[:-1] != r[:-1]:
            raise Bad("prompt", "without a `prompt`, `chosen` and `rejected` must be whole chats "
                                "that differ only in their last (assistant) turn")
        prompt, chosen, rejected = c[:-1], c[-1:], r[-1:]
    prompt = _with_system(prompt, system)
    check_turns(prompt, "prompt", need_answer=False)
    if prompt[-1]["role"] != "user":
        raise Bad("prompt", "`prompt` must end with a user turn")
    for k, msgs in (("chosen", chosen), ("rejected", rejected)):
        if [m["role"] for m in msgs] != ["assistant"]:
            raise Bad(k, f"`{k}` must be one assistant answer")
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected, **extra}


def _labeled(rec: dict, system: str | None) -> dict:
    """TRL's unpaired preference form (KTO): a prompt, one completion and whether it is
    desirable (`label`: true) or not."""
    for k in ("prompt", "completion", "label"):
        if k not in rec:
            raise Bad(k, f"missing field `{k}`")
    if not isinstance(rec["label"], bool):
        raise Bad("label", f"`label` must be true (desirable) or false, not {rec['label']!r}")
    extra, names = _tools(rec)
    prompt = _with_system(_as_messages(rec["prompt"], "prompt", "user", names), system)
    check_turns(prompt, "prompt", need_answer=False)
    if prompt[-1]["role"] != "user":
        raise Bad("prompt", "`prompt` must end with a user turn")
    completion = _as_messages(rec["completion"], "completion", "assistant", names)
    if [m["role"] for m in completion] != ["assistant"]:
        raise Bad("completion", "`completion` must be one assistant answer")
    return {"prompt": prompt, "completion": completion, "label": rec["label"], **extra}


def unpair(records: list[dict]) -> list[dict]:
    """Pairs → labeled records (KTO from preference data): the chosen answer desirable, the
    rejected one not. Each keeps the pair's other fields; its id gets `:chosen` / `:rejected`."""
    out = []
    for r in records:
        rest = {k: v for k, v in r.items() if k not in ("chosen", "rejected", "id")}
        for answer, good in (("chosen", True), ("rejected", False)):
            out.append({**rest, "id": f"{r.get('id', '')}:{answer}", "prompt": r["prompt"],
                        "completion": r[answer], "label": good})
    return out


def _chat(read: Callable[[dict, set | None], list[dict]], key: str = "messages"):
    """A chat format's normalize: its tools, its messages (`read`, calls checked against the
    tools), the system prompt, then the turn checks (errors name the list `key`)."""
    def normalize(rec: dict, system: str | None) -> dict:
        extra, names = _tools(rec)
        msgs = _with_system(read(rec, names), system)
        check_turns(msgs, key)
        return {"messages": msgs, **extra}
    return normalize


@dataclass(frozen=True)
class Format:
    """One input format: `detect(rec)` says whether a record's keys are this format's;
    `normalize(rec, system)` makes mens's record of `kind` from it (or raises Bad); `expected`
    is the shape shown when a record does not fit."""
    name: str
    kind: Kind
    expected: str
    detect: Callable[[dict], bool]
    normalize: Callable[[dict, str | None], dict]


FORMATS: dict[str, Format] = {f.name: f for f in (   # the listing order of errors and the README
    Format("messages", "chat",
           '{"messages": [{"role": "user", "content": …}, {"role": "assistant", …}]}',
           lambda r: "messages" in r,
           _chat(lambda r, n: _messages(r.get("messages"), "messages", names=n))),
    Format("sharegpt", "chat",
           '{"conversations": [{"from": "human", "value": …}, {"from": "gpt", …}]}',
           lambda r: "conversations" in r,
           _chat(lambda r, n: _messages(r.get("conversations"), "conversations", SHAREGPT_ROLES, n),
                 "conversations")),
    Format("alpaca", "chat", '{"instruction": …, "input": … (optional), "output": …}',
           lambda r: "instruction" in r and "output" in r, _chat(_alpaca)),
    Format("prompt_completion", "chat", '{"prompt": …, "completion": …}',
           lambda r: "prompt" in r and "completion" in r, _chat(_prompt_completion)),
    Format("text", "text", '{"text": …}', lambda r: "text" in r, _plain),
    Format("preference", "pair", '{"prompt": …, "chosen": …, "rejected": …}',
           lambda r: "chosen" in r and "rejected" in r, _pair),
    Format("labeled", "labeled", '{"prompt": …, "completion": …, "label": true|false}',
           lambda r: "label" in r and "completion" in r and "prompt" in r, _labeled),
)}
EXPECTED = {f.name: f.expected for f in FORMATS.values()}
# a format's kind in the words of `lane` and a spoke's `sources[].kind` (stats, errors)
DATA_KIND = {f.name: {"chat": "sft", "pair": "preference", "labeled": "labeled",
                      "text": "text"}[f.kind]
             for f in FORMATS.values()}


def detect(rec: dict) -> str | None:
    """The format a record's keys say, or None. A pair is tried first: its chosen/rejected may
    sit beside another format's keys (a `prompt`, whole chats); then the listing order."""
    for f in sorted(FORMATS.values(), key=lambda f: (f.kind != "pair", f.kind != "labeled")):
        if f.detect(rec):
            return f.name
    return None


def normalize(rec: dict, fmt: str, system: str | None = None,
              tools: list[dict] | None = None) -> dict:
    """The record in mens's form: {"messages"} | {"prompt", "chosen", "rejected"} |
    {"prompt", "completion", "label"} | {"text"}; + "tools" where it lists any. `tools`
    (data.tools) are the schemas of a conversational record that lists none."""
    if not isinstance(rec, dict):
        raise Bad("record", "each record must be a JSON object")
    if fmt not in FORMATS:
        raise Bad("format", f"unknown format {fmt!r}")
    if tools and FORMATS[fmt].kind != "text" and not rec.get("tools"):
        rec = {**rec, "tools": tools}
    return FORMATS[fmt].normalize(rec, system)


def words(rec: dict) -> list[str]:
    """Lower-cased words of a record's whole text (for n-gram decontamination)."""
    if kind(rec) == "text":
        return rec["text"].lower().split()
    parts = []
    for m in turns(rec):
        parts.append(m["content"])
        parts += [T.call_text(c) for c in m.get("tool_calls") or []]
    return " ".join(parts).lower().split()
