"""A tool-calling dataset the agent tests write: OpenAI-format records over six tools whose
arguments are taken from the user's words (a city, an amount and two currencies, a date…), plus
records that need no call (relevance). Deterministic for a seed; nothing is downloaded.

Each record: {"tools": [the six schemas], "messages": [user, assistant(tool_calls, content
null, arguments as a JSON string — as OpenAI sends them), tool result, assistant answer]}, or
[user, assistant answer] for a prompt that needs no tool.
"""
from __future__ import annotations

import json
import random

CITIES = ["Paris", "Berlin", "Madrid", "Lisbon", "Oslo", "Vienna", "Prague", "Dublin", "Rome",
          "Warsaw", "Athens", "Zurich", "Helsinki", "Budapest", "Brussels", "Milan", "Munich",
          "Lyon", "Porto", "Seville", "Krakow", "Bergen", "Geneva", "Naples", "Valencia"]
CODES = ["USD", "EUR", "GBP", "JPY", "CHF", "SEK", "NOK", "PLN", "CZK", "DKK"]
AIRPORTS = ["CDG", "BER", "MAD", "LIS", "OSL", "VIE", "PRG", "DUB", "FCO", "WAW", "ATH", "ZRH"]
NAMES = ["anna", "ben", "carla", "dev", "ema", "felix", "gita", "hugo", "ines", "jon"]
DOMAINS = ["example.com", "mail.org", "corp.net"]
SUBJECTS = ["budget", "launch plan", "offsite", "hiring", "roadmap", "invoice", "demo"]
LABELS = ["tea", "pasta", "laundry", "standup", "break", "oven", "call"]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "units": {"type": "string", "enum": ["metric", "imperial"]}},
            "required": ["city", "units"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "convert_currency", "description": "Convert an amount between currencies.",
        "parameters": {"type": "object", "properties": {
            "amount": {"type": "integer", "minimum": 1},
            "source": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "target": {"type": "string", "pattern": "^[A-Z]{3}$"}},
            "required": ["amount", "source", "target"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "search_flights", "description": "Find flights between two airports.",
        "parameters": {"type": "object", "properties": {
            "origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "date": {"type": "string", "pattern": "^2027-[0-9]{2}-[0-9]{2}$"}},
            "required": ["origin", "destination", "date"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "set_timer", "description": "Start a countdown timer.",
        "parameters": {"type": "object", "properties": {
            "minutes": {"type": "integer", "minimum": 1, "maximum": 120},
            "label": {"type": "string"}},
            "required": ["minutes", "label"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "send_email", "description": "Send a short email.",
        "parameters": {"type": "object", "properties": {
            "to": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.[a-z]+$"},
            "subject": {"type": "string"}},
            "required": ["to", "subject"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The local time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"], "additionalProperties": False}}},
]


def _weather(r):
    city, units = r.choice(CITIES), r.choice(["metric", "imperial"])
    say = r.choice(["What's the weather in {c} in {u} units?", "Weather for {c}, {u} please.",
                    "How warm is it in {c}? Use {u} units.", "{c} weather ({u})?"])
    temp = r.randint(-5, 35)
    return (say.format(c=city, u=units), "get_weather", {"city": city, "units": units},
            {"city": city, "temp": temp}, f"It is {temp} degrees in {city}.")


def _currency(r):
    amount, a, b = r.randint(2, 900), *r.sample(CODES, 2)
    say = r.choice(["Convert {n} {a} to {b}.", "How much is {n} {a} in {b}?",
                    "Change {n} {a} into {b} for me.", "{n} {a} to {b}?"])
    got = round(amount * r.uniform(0.2, 3), 2)
    return (say.format(n=amount, a=a, b=b), "convert_currency",
            {"amount": amount, "source": a, "target": b}, {"result": got},
            f"{amount} {a} is {got} {b}.")


def _flights(r):
    o, d = r.sample(AIRPORTS, 2)
    date = f"2027-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"
    say = r.choice(["Find flights from {o} to {d} on {t}.", "Any flights {o} to {d} on {t}?",
                    "Search {o} -> {d}, {t}.", "I need a flight from {o} to {d} on {t}."])
    n = r.randint(0, 6)
    return (say.format(o=o, d=d, t=date), "search_flights",
            {"origin": o, "destination": d, "date": date}, {"flights": n},
            f"I found {n} flights from {o} to {d}.")


def _timer(r):
    m, label = r.randint(1, 90), r.choice(LABELS)
    say = r.choice(["Set a {m} minute timer for {l}.", "Timer: {m} minutes, {l}.",
                    "Remind me in {m} minutes about the {l}.", "Start a {l} timer for {m} minutes."])
    return (say.format(m=m, l=label), "set_timer", {"minutes": m, "label": label},
            {"ok": True}, f"Your {label} timer is set for {m} minutes.")


def _email(r):
    to = f"{r.choice(NAMES)}@{r.choice(DOMAINS)}"
    subject = r.choice(SUBJECTS)
    say = r.choice(["Email {t} about the {s}.", "Send {t} a note on the {s}.",
                    "Write to {t}, subject {s}.", "Mail {t} regarding the {s}."])
    return (say.format(t=to, s=subject), "send_email", {"to": to, "subject": subject},
            {"sent": True}, f"I emailed {to} about the {subject}.")


def _time(r):
    city = r.choice(CITIES)
    say = r.choice(["What time is it in {c}?", "Local time in {c}?", "Tell me the time in {c}.",
                    "Current time for {c}?"])
    hh = f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}"
    return (say.format(c=city), "get_time", {"city": city}, {"time": hh},
            f"It is {hh} in {city}.")


KINDS = [_weather, _currency, _flights, _timer, _email, _time]
CHATS = [("Hello!", "Hello! How can I help?"), ("Thanks a lot.", "You are welcome."),
         ("Who are you?", "I am an assistant that can call tools."),
         ("Tell me a joke.", "Why did the function return? It had no more arguments."),
         ("Good night.", "Good night!")]


def _offered(r: random.Random, name: str | None, k: int) -> list[dict]:
    """k of the tools, the needed one among them, in the catalogue's order."""
    others = [t for t in TOOLS if t["function"]["name"] != name]
    pick = r.sample(others, k - (name is not None)) + \
        [t for t in TOOLS if t["function"]["name"] == name]
    return [t for t in TOOLS if t in pick]


def record(r: random.Random, i: int, chat_share: float = 0.1, k: int = 6,
           result_share: float = 1.0) -> dict:
    """One record: k tools offered; the call's result and the final answer with probability
    result_share (else the record ends at the call, as a turn of an agent loop does)."""
    if r.random() < chat_share:
        q, a = r.choice(CHATS)
        return {"tools": _offered(r, None, k), "messages": [
            {"role": "user", "content": q}, {"role": "assistant", "content": a}]}
    say, name, args, result, answer = KINDS[i % len(KINDS)](r)
    cid = f"call{i:05d}"
    msgs = [{"role": "user", "content": say},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args)}}]}]
    if r.random() < result_share:
        msgs += [{"role": "tool", "tool_call_id": cid, "content": json.dumps(result)},
                 {"role": "assistant", "content": answer}]
    return {"tools": _offered(r, name, k), "messages": msgs}


def write(path, n: int, seed: int = 0, chat_share: float = 0.1, k: int = 6,
          result_share: float = 1.0) -> list[dict]:
    r = random.Random(seed)
    recs = [record(r, i, chat_share, k, result_share) for i in range(n)]
    with open(path, "w") as f:
        for rec in recs:
            f.write(json.dumps(rec) + "\n")
    return recs
