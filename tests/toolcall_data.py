"""A tool-calling dataset written by the tests themselves (issue #38): OpenAI-format records over
six tools whose arguments are taken from the user's words, so a tiny model can learn to copy
them. Each record offers three of the six tools (the one called among them) at record level;
most call one tool, read its result and answer; some need no call at all (relevance)."""
from __future__ import annotations

import json
import random

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "minLength": 2},
            "units": {"type": "string", "enum": ["metric", "imperial"], "default": "metric"}},
            "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "convert_currency", "description": "Convert an amount between currencies.",
        "parameters": {"type": "object", "properties": {
            "amount": {"type": "number", "exclusiveMinimum": 0},
            "from": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "to": {"type": "string", "pattern": "^[A-Z]{3}$"}},
            "required": ["amount", "from", "to"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "search_files", "description": "Find files whose name matches a glob.",
        "parameters": {"type": "object", "properties": {
            "glob": {"type": "string", "minLength": 1},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100}},
            "required": ["glob"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a text file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string", "minLength": 1}},
                       "required": ["path"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "set_timer", "description": "Start a countdown timer.",
        "parameters": {"type": "object", "properties": {
            "minutes": {"type": "integer", "minimum": 1}, "label": {"type": "string"}},
            "required": ["minutes"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "send_email", "description": "Send a short email.",
        "parameters": {"type": "object", "properties": {
            "to": {"type": "string", "pattern": "^[^@ ]+@[^@ ]+$"}, "subject": {"type": "string"}},
            "required": ["to", "subject"], "additionalProperties": False}}},
]
NAMES = [t["function"]["name"] for t in TOOLS]
CITIES = ["Paris", "Lima", "Oslo", "Cairo", "Tokyo", "Quito", "Perth", "Dakar", "Hanoi", "Bern"]
CURRENCIES = ["EUR", "USD", "JPY", "GBP", "CHF", "INR"]
WORDS = ["report", "notes", "budget", "draft", "summary", "invoice", "plan", "log"]
PEOPLE = ["ana", "bo", "cy", "dee", "eli", "fay"]


def _call(rng: random.Random, name: str) -> tuple[str, dict, str, str]:
    """(user request, arguments, tool result, final answer) for one call of `name`."""
    if name == "get_weather":
        c = rng.choice(CITIES)
        return (f"What is the weather in {c}?", {"city": c}, '{"temp_c": 18}',
                f"It is 18 degrees in {c}.")
    if name == "convert_currency":
        a, f, t = rng.randint(2, 900), *rng.sample(CURRENCIES, 2)
        return (f"Convert {a} {f} to {t}.", {"amount": a, "from": f, "to": t},
                '{"result": 42.0}', f"{a} {f} is 42.0 {t}.")
    if name == "search_files":
        w, k = rng.choice(WORDS), rng.randint(2, 9)
        return (f"Find up to {k} files matching {w}*.txt.", {"glob": f"{w}*.txt", "limit": k},
                f'["{w}1.txt"]', f"I found {w}1.txt.")
    if name == "read_file":
        w = rng.choice(WORDS)
        return (f"Read the file {w}.md.", {"path": f"{w}.md"}, '"hello"', f"{w}.md says hello.")
    if name == "set_timer":
        m = rng.randint(1, 59)
        return (f"Set a timer for {m} minutes.", {"minutes": m}, '{"ok": true}',
                f"Your {m} minute timer is running.")
    p, w = rng.choice(PEOPLE), rng.choice(WORDS)
    return (f"Email {p}@example.org with the subject {w}.", {"to": f"{p}@example.org",
                                                             "subject": w},
            '{"sent": true}', f"I sent the {w} email to {p}.")


def tool_records(n: int, seed: int = 0, no_call_every: int = 5) -> list[dict]:
    """n records in OpenAI's format (arguments as JSON strings, as OpenAI sends them; ids on the
    calls). Every `no_call_every`-th record offers tools but needs none."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        name = rng.choice(NAMES)
        offered = [name, *rng.sample([x for x in NAMES if x != name], 2)]
        rng.shuffle(offered)
        tools = [t for t in TOOLS if t["function"]["name"] in offered]
        if no_call_every and i % no_call_every == no_call_every - 1:
            w = rng.choice(WORDS)
            msgs = [{"role": "user", "content": f"Say the word {w} back to me."},
                    {"role": "assistant", "content": f"{w}."}]
        else:
            ask, args, result, answer = _call(rng, name)
            cid = f"call_{i}"
            msgs = [{"role": "user", "content": ask},
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": cid, "type": "function",
                         "function": {"name": name, "arguments": json.dumps(args)}}]},
                    {"role": "tool", "tool_call_id": cid, "content": result},
                    {"role": "assistant", "content": answer}]
        out.append({"messages": msgs, "tools": tools})
    return out


def write_jsonl(path, records: list[dict]):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path
