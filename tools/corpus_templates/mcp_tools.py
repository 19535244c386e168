"""The MCP tool catalogue for mcp_tool_chain: declared JSON schemas plus deterministic
executors, so a chained call's arguments really come from the previous result (coordinates
from geocode feed route_distance, which computes a true great-circle distance)."""
from __future__ import annotations

import math

CITIES = {"Paris": (48.8566, 2.3522), "Berlin": (52.52, 13.405), "Madrid": (40.4168, -3.7038),
          "Rome": (41.9028, 12.4964), "Vienna": (48.2082, 16.3738), "Prague": (50.0755, 14.4378),
          "Lisbon": (38.7223, -9.1393), "Amsterdam": (52.3676, 4.9041),
          "Oslo": (59.9139, 10.7522), "Warsaw": (52.2297, 21.0122), "Dublin": (53.3498, -6.2603),
          "Zurich": (47.3769, 8.5417), "Stockholm": (59.3293, 18.0686),
          "Budapest": (47.4979, 19.0402), "Athens": (37.9838, 23.7275),
          "Copenhagen": (55.6761, 12.5683), "Helsinki": (60.1699, 24.9384),
          "Brussels": (50.8503, 4.3517)}
RATES = {"EUR": 1.0, "USD": 1.08, "GBP": 0.85, "JPY": 162.0, "CHF": 0.96, "SEK": 11.4,
         "NOK": 11.6, "PLN": 4.3, "CZK": 25.2}
REPOS = ["acme/api", "acme/web", "northwind/ledger", "orbital/telemetry", "kestrel/cli",
         "harbor/docs", "quarry/search", "lumen/mobile", "vale/infra"]
LABELS = ["bug", "enhancement", "docs", "performance", "security", "flaky-test"]
PEOPLE = ["mira@example.com", "tomas@example.com", "ines@example.org", "kofi@example.net",
          "lena@example.com", "arjun@example.org", "sofia@example.net", "yuki@example.com",
          "omar@example.org"]
EMAIL = r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$"
S = lambda **p: {"type": "string", **p}
I = lambda **p: {"type": "integer", **p}

TOOLS = {
    "geocode": ("Look up the coordinates of a city.", {
        "type": "object", "properties": {"city": S(minLength=2)}, "required": ["city"],
        "additionalProperties": False}),
    "route_distance": ("Great-circle distance in km between two points.", {
        "type": "object", "properties": {k: {"type": "number", "minimum": -180, "maximum": 180}
                                         for k in ("from_lat", "from_lon", "to_lat", "to_lon")},
        "required": ["from_lat", "from_lon", "to_lat", "to_lon"], "additionalProperties": False}),
    "convert_currency": ("Convert an amount between ISO 4217 currencies.", {
        "type": "object", "properties": {"amount": {"type": "number", "minimum": 0},
                                         "from": S(pattern="^[A-Z]{3}$"),
                                         "to": S(pattern="^[A-Z]{3}$")},
        "required": ["amount", "from", "to"], "additionalProperties": False}),
    "get_weather": ("Current weather for a city.", {
        "type": "object", "properties": {"city": S(minLength=2),
                                         "units": S(enum=["metric", "imperial"])},
        "required": ["city"], "additionalProperties": False}),
    "list_issues": ("List issues of a repository.", {
        "type": "object", "properties": {"repo": S(pattern=r"^[\w.-]+/[\w.-]+$"),
                                         "state": S(enum=["open", "closed", "all"]),
                                         "label": S(enum=LABELS)},
        "required": ["repo", "state"], "additionalProperties": False}),
    "create_issue": ("Open an issue.", {
        "type": "object", "properties": {"repo": S(pattern=r"^[\w.-]+/[\w.-]+$"),
                                         "title": S(minLength=8), "body": S(),
                                         "labels": {"type": "array", "items": S(enum=LABELS)}},
        "required": ["repo", "title"], "additionalProperties": False}),
    "sql_query": ("Run a read-only SQL query.", {
        "type": "object", "properties": {"database": S(enum=["analytics", "billing", "inventory"]),
                                         "query": S(pattern=r"^\s*(SELECT|WITH)\b")},
        "required": ["database", "query"], "additionalProperties": False}),
    "send_email": ("Send an email.", {
        "type": "object", "properties": {"to": {"type": "array", "minItems": 1,
                                                "items": S(pattern=EMAIL)},
                                         "subject": S(minLength=3), "body": S()},
        "required": ["to", "subject", "body"], "additionalProperties": False}),
    "find_free_slot": ("Find common free time for attendees on a day.", {
        "type": "object", "properties": {"attendees": {"type": "array", "minItems": 1,
                                                       "items": S(pattern=EMAIL)},
                                         "day": S(pattern=r"^\d{4}-\d{2}-\d{2}$"),
                                         "duration_minutes": I(minimum=15, maximum=240)},
        "required": ["attendees", "day", "duration_minutes"], "additionalProperties": False}),
    "create_event": ("Create a calendar event.", {
        "type": "object", "properties": {"title": S(minLength=3),
                                         "start": S(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$"),
                                         "duration_minutes": I(minimum=15, maximum=240),
                                         "attendees": {"type": "array", "items": S(pattern=EMAIL)}},
        "required": ["title", "start", "duration_minutes"], "additionalProperties": False}),
    "search_files": ("Search files in the project for a literal string.", {
        "type": "object", "properties": {"query": S(minLength=1), "glob": S(),
                                         "max_results": I(minimum=1, maximum=50)},
        "required": ["query"], "additionalProperties": False}),
    "read_file": ("Read lines of a file.", {
        "type": "object", "properties": {"path": S(minLength=1), "start_line": I(minimum=1),
                                         "end_line": I(minimum=1)},
        "required": ["path"], "additionalProperties": False}),
}


def declare(names) -> list[dict]:
    """The record's `tools`: these tools' schemas, in this order (the template writes them)."""
    from .common import schema
    return [schema(n, *TOOLS[n]) for n in names]


def haversine(a, b) -> float:
    la1, lo1, la2, lo2 = map(math.radians, (*a, *b))
    h = math.sin((la2 - la1) / 2) ** 2 + math.cos(la1) * math.cos(la2) * math.sin((lo2 - lo1) / 2) ** 2
    return round(2 * 6371.0 * math.asin(math.sqrt(h)), 1)


def convert(amount, src, dst) -> tuple[float, float]:
    rate = RATES[dst] / RATES[src]
    return round(amount * rate, 2), round(rate, 4)
