"""mcp_tool_chain: choosing MCP tools, schema-valid arguments, and chains where each call's
arguments come from earlier results. Records keep tool use as structure — the tools in the
record's `tools`, each call in an assistant turn's `tool_calls`, each result a `tool` turn naming
the call it answers — so every model family's chat template writes them in its own syntax; the
admission check validates every call against its tool's schema."""
from __future__ import annotations

from .common import act, fn, jdump, msg, tool_record
from .mcp_tools import CITIES, LABELS, PEOPLE, RATES, REPOS, TOOLS, convert, declare, haversine

# No call syntax here: the chat template declares the tools and shows how its family calls them.
INTRO = [
    "You can call MCP tools. A call's arguments must satisfy the tool's JSON schema. Use values "
    "from earlier results instead of guessing them.",
    "Tools are available. Call them with arguments that validate against each schema; "
    "independent calls may go in one turn. Answer from the results.",
    "You are an assistant connected to MCP servers. Call tools as needed, chain results into "
    "later calls, and report what the tools returned.",
]
CURRENCY = {"EUR": ["euros", "EUR", "€"], "USD": ["US dollars", "dollars", "USD"],
            "GBP": ["pounds", "British pounds", "GBP"], "JPY": ["yen", "Japanese yen", "JPY"],
            "CHF": ["Swiss francs", "francs", "CHF"], "SEK": ["Swedish kronor", "kronor", "SEK"],
            "NOK": ["Norwegian kroner", "NOK", "kroner"], "PLN": ["zloty", "złoty", "PLN"],
            "CZK": ["Czech koruna", "koruna", "CZK"]}
CONDITIONS = ["clear", "light rain", "overcast", "fog", "showers", "partly cloudy", "snow",
              "windy", "drizzle"]


def call(name: str, args: dict) -> dict:
    assert name in TOOLS
    return fn(name, args)


def system(c, names: list[str], distractors: int = 0) -> tuple[dict, list[dict]]:
    """(the system turn, the record's `tools`): the needed tools plus distractors, shuffled."""
    extra = [n for n in sorted(TOOLS) if n not in names]
    tools = names + c.rng.sample(extra, distractors)
    c.rng.shuffle(tools)
    return msg("system", c.choice(INTRO)), declare(tools)


def weather(c):
    city = c.pick(sorted(CITIES))
    imperial = c.chance(0.4)
    args = {"city": city, **({"units": "imperial"} if imperial else {})}
    t = c.randint(-5, 33)
    temp = round(t * 9 / 5 + 32) if imperial else t
    cond = c.choice(CONDITIONS)
    unit = "°F" if imperial else "°C"
    user = c.pick([f"What's the weather in {city}{' in Fahrenheit' if imperial else ''}?",
                   f"Weather check: {city}{', imperial units' if imperial else ''}.",
                   f"Is it cold in {city} right now?{' (°F please)' if imperial else ''}"])
    dist = c.choice([0, 0, 2])
    system_turn, tools = system(c, ["get_weather"], dist)
    msgs = [system_turn, msg("user", user),
            act("", call("get_weather", args)),
            msg("tool", jdump({"city": city, "temp": temp, "units": "imperial" if imperial else
                               "metric", "conditions": cond})),
            msg("assistant", c.pick([f"{city}: {temp} {unit}, {cond}.", f"It's {temp} {unit} "
                                     f"in {city} with {cond}.", f"Currently {cond} in {city}, "
                                     f"{temp} {unit}."]))]
    return tool_record(msgs, tools, 1 + imperial + (dist > 0), "warmup", "single_weather")


def currency(c):
    src, dst = c.rng.sample(sorted(RATES), 2)
    amount = c.choice([c.randint(5, 5000), round(c.randint(100, 99999) / 100, 2)])
    got, rate = convert(amount, src, dst)
    user = c.pick([f"How much is {amount} {c.choice(CURRENCY[src])} in {c.choice(CURRENCY[dst])}?",
                   f"Convert {amount} {c.choice(CURRENCY[src])} to {c.choice(CURRENCY[dst])}.",
                   f"I have {amount} {c.choice(CURRENCY[src])}; what's that in "
                   f"{c.choice(CURRENCY[dst])}?"])
    dist = c.choice([0, 2, 3])
    system_turn, tools = system(c, ["convert_currency"], dist)
    msgs = [system_turn, msg("user", user),
            act("", call("convert_currency", {"amount": amount, "from": src, "to": dst})),
            msg("tool", jdump({"converted": got, "rate": rate, "as_of": "2025-03-14"})),
            msg("assistant", f"{amount} {src} is {got} {dst} (rate {rate}, as of 2025-03-14).")]
    return tool_record(msgs, tools, 2 + (dist > 0), "warmup" if dist == 0 else "syntax", "single_currency")


def issues(c):
    repo, label = c.pick(REPOS), c.choice(LABELS)
    state = c.choice(["open", "closed", "all"])
    found = [{"number": c.randint(10, 2000), "title": f"{c.choice(['Crash', 'Timeout', 'Typo', 'Leak', 'Race', 'Slow query'])} in "
              f"{c.choice(['login', 'export', 'sync', 'upload', 'billing', 'search'])}",
              "state": state if state != "all" else c.choice(["open", "closed"])}
             for _ in range(c.randint(0, 3))]
    user = c.pick([f"Any {state if state != 'all' else ''} {label} issues in {repo}?",
                   f"List {label}-labelled issues ({state}) for {repo}.",
                   f"Show me {repo}'s {label} issues, state: {state}."])
    listing = "; ".join(f"#{i['number']} {i['title']} ({i['state']})" for i in found)
    system_turn, tools = system(c, ["list_issues", "create_issue"], c.choice([0, 2]))
    msgs = [system_turn, msg("user", user),
            act("", call("list_issues", {"repo": repo, "state": state, "label": label})),
            msg("tool", jdump({"issues": found})),
            msg("assistant", f"{len(found)} {label} issue{'s' * (len(found) != 1)} in {repo}"
                + (f": {listing}." if found else "."))]
    return tool_record(msgs, tools, c.choice([3, 4]), "syntax", "single_issues")


SQL = {"billing": ("invoices", "status", ["paid", "open", "void", "overdue"]),
       "inventory": ("items", "warehouse", ["north", "south", "east", "west"]),
       "analytics": ("sessions", "platform", ["ios", "android", "web", "desktop"])}


def sql(c):
    db = c.pick(sorted(SQL))                  # eval queries hit a database training never does
    table, col, values = SQL[db]
    n = c.pick(["n", "cnt", "total", "how_many", "num", "count_rows"])
    month = c.randint(1, 9)
    day = f"2025-0{month}-{c.randint(10, 28)}"
    if c.chance(0.15):             # a per-day breakdown: a long table, as real reports are
        q = (f"SELECT CAST(created_at AS DATE) AS day, {col}, COUNT(*) AS {n} FROM {table} "
             f"WHERE created_at >= DATE '{day}' GROUP BY 1, 2 ORDER BY 1, 3 DESC")
        rows = sorted(([f"2025-{month + 1:02d}-{d:02d}", v, c.randint(1, 400)] for v in values
                       for d in c.rng.sample(range(1, 29), c.randint(10, 24))),
                      key=lambda r: (r[0], -r[2]))
        user = c.pick([f"Daily {table} per {col} since {day} from {db}, as a table.",
                       f"{db}: {table} by day and {col}, from {day} on.",
                       f"Per-day counts of {table} split by {col} since {day}?"])
        cols, head = ["day", col, n], f"| day | {col} | {table} |\n|---|---|---|"
        body = "\n".join(f"| {r[0]} | {r[1]} | {r[2]} |" for r in rows)
        total = sum(r[2] for r in rows)
        d = c.choice([5, 6])
    else:
        q = (f"SELECT {col}, COUNT(*) AS {n} FROM {table} WHERE created_at >= DATE '{day}' "
             f"GROUP BY {col} ORDER BY {n} DESC")
        rows = sorted(([v, c.randint(1, 900)] for v in c.rng.sample(values, c.randint(2, 4))),
                      key=lambda r: -r[1])
        user = c.pick([f"In {db}, how many {table} per {col} since {day}?",
                       f"Break down {table} by {col} from {day} on ({db} db).",
                       f"Counts of {table} grouped by {col}, created on or after {day}, please."])
        cols, head = [col, n], f"| {col} | {table} |\n|---|---|"
        body = "\n".join(f"| {r[0]} | {r[1]} |" for r in rows)
        total = sum(r[1] for r in rows)
        d = c.choice([4, 5])
    system_turn, tools = system(c, ["sql_query"], c.choice([1, 3]))
    msgs = [system_turn, msg("user", user),
            act("", call("sql_query", {"database": db, "query": q})),
            msg("tool", jdump({"columns": cols, "rows": rows})),
            msg("assistant", f"{head}\n{body}\n\nTotal: {total}.")]
    return tool_record(msgs, tools, d, "reasoning", "single_sql")


def ambiguous(c):
    city, temp, cond = c.pick(sorted(CITIES)), c.randint(-5, 30), c.choice(CONDITIONS)
    system_turn, tools = system(c, ["get_weather", "geocode"], 1)
    msgs = [system_turn,
            msg("user", c.pick([f"Weather in {city[:3]}?", f"How's the weather in {city[:4]}…",
                                 f"weather {city[:3].lower()}"])),
            act("", call("get_weather", {"city": city[:3] if len(city) > 4 else city})),
            msg("tool", jdump({"error": "unknown city", "did_you_mean": [city]})),
            msg("assistant", f"The weather service doesn't know that name; did you mean {city}?"),
            msg("user", c.pick(["yes", "Yes, that one.", f"yep, {city}"])),
            act("", call("get_weather", {"city": city})),
            msg("tool", jdump({"city": city, "temp": temp, "units": "metric",
                               "conditions": cond})),
            msg("assistant", f"{city}: {temp} °C, {cond}.")]
    return tool_record(msgs, tools, 6, "tool_call", "single_recover")


def distance(c, follow: bool = False):
    a, b, d3 = c.rng.sample(c.part(sorted(CITIES)), 3)
    km = haversine(CITIES[a], CITIES[b])
    system_turn, tools = system(c, ["geocode", "route_distance"], c.choice([0, 2]))
    msgs = [system_turn,
            msg("user", c.pick([f"How far is {a} from {b} as the crow flies?",
                                f"Straight-line distance {a} → {b}?",
                                f"Distance between {a} and {b} in km, great-circle."])),
            act(c.pick(["Coordinates first, both at once.", "Looking up both cities.",
                        "Geocoding the two cities."]),
                call("geocode", {"city": a}), call("geocode", {"city": b})),
            msg("tool", jdump({"city": a, "lat": CITIES[a][0], "lon": CITIES[a][1]})),
            msg("tool", jdump({"city": b, "lat": CITIES[b][0], "lon": CITIES[b][1]})),
            act("", call("route_distance", {"from_lat": CITIES[a][0], "from_lon": CITIES[a][1],
                                                     "to_lat": CITIES[b][0], "to_lon": CITIES[b][1]})),
            msg("tool", jdump({"km": km})),
            msg("assistant", f"{a} to {b}: {km} km great-circle (road distance is longer).")]
    if not follow:
        return tool_record(msgs, tools, 5, "tool_call", "chain_distance")
    km2 = haversine(CITIES[b], CITIES[d3])
    msgs += [msg("user", c.pick([f"And from {b} on to {d3}?", f"Then {b} to {d3}?",
                                 f"What about continuing to {d3}?"])),
             act(f"{b}'s coordinates are already known; only {d3} is new.",
                 call("geocode", {"city": d3})),
             msg("tool", jdump({"city": d3, "lat": CITIES[d3][0], "lon": CITIES[d3][1]})),
             act("", call("route_distance", {"from_lat": CITIES[b][0], "from_lon": CITIES[b][1],
                                                      "to_lat": CITIES[d3][0], "to_lon": CITIES[d3][1]})),
             msg("tool", jdump({"km": km2})),
             msg("assistant", f"{b} to {d3}: {km2} km, so {round(km + km2, 1)} km for the whole "
                              f"route {a} → {b} → {d3}.")]
    return tool_record(msgs, tools, 7, "multi_turn", "chain_distance_followup")


def meeting(c):
    who = c.picks(PEOPLE, c.randint(2, 3))
    day = f"2025-{c.randint(1, 12):02d}-{c.randint(1, 28):02d}"
    dur = c.choice([15, 30, 45, 60, 90])
    title = c.pick(["Design review", "Sprint planning", "Incident retro", "1:1 sync",
                    "Roadmap check-in", "Hiring debrief", "Budget review", "Release go/no-go",
                    "Onboarding walkthrough"])
    slots = sorted(f"{day}T{h:02d}:{m:02d}" for h, m in {(c.randint(9, 16), c.choice([0, 30]))
                                                         for _ in range(3)})
    system_turn, tools = system(c, ["find_free_slot", "create_event"], c.choice([0, 1]))
    msgs = [system_turn,
            msg("user", c.pick([f"Book a {dur}-minute '{title}' with {', '.join(who)} on {day}, "
                                f"earliest free time.", f"Schedule {title} ({dur} min) for "
                                f"{' and '.join(who)} on {day}.", f"Find a slot on {day} for "
                                f"{title}, {dur} minutes, attendees {', '.join(who)}, and book it."])),
            act("", call("find_free_slot", {"attendees": who, "day": day,
                                                     "duration_minutes": dur})),
            msg("tool", jdump({"slots": slots})),
            act(c.pick([f"Earliest common slot is {slots[0][11:]}; booking it.",
                        f"{slots[0][11:]} is the first time all are free, so that's the one.",
                        f"Taking the earliest option, {slots[0][11:]}."]),
                call("create_event", {"title": title, "start": slots[0], "duration_minutes": dur,
                                      "attendees": who})),
            msg("tool", jdump({"event_id": f"evt_{c.randint(10000, 99999)}", "start": slots[0]})),
            msg("assistant", f"Booked '{title}' on {day} at {slots[0][11:]} for {dur} minutes with "
                             f"{', '.join(who)}. Other free slots: {', '.join(s[11:] for s in slots[1:]) or 'none'}.")]
    return tool_record(msgs, tools, 6, "tool_call", "chain_meeting")


def dedupe_issue(c):
    repo, area = c.pick(REPOS), c.pick(["export", "login", "sync", "upload", "search", "billing",
                                        "webhooks", "reports", "settings"])
    title = f"{c.choice(['Crash', 'Timeout', 'Data loss', 'Wrong totals'])} in {area}"
    dup = c.chance(0.4)
    existing = [{"number": c.randint(10, 999), "title": title if dup else f"Typo in {area} docs",
                 "labels": ["bug"] if dup else ["docs"]}]
    system_turn, tools = system(c, ["list_issues", "create_issue"], c.choice([0, 2]))
    msgs = [system_turn,
            msg("user", c.pick([f"File a bug in {repo}: '{title}' — unless it's already open.",
                                f"Open an issue '{title}' on {repo}, but check for duplicates first.",
                                f"Report '{title}' in {repo} if nobody has yet."])),
            act("", call("list_issues", {"repo": repo, "state": "open", "label": "bug"})),
            msg("tool", jdump({"issues": [i for i in existing if "bug" in i["labels"]]}))]
    if dup:
        msgs.append(msg("assistant", f"Already tracked: #{existing[0]['number']} '{title}' is open "
                                     f"in {repo}, so I did not file a duplicate."))
        return tool_record(msgs, tools, 8, "orchestration", "chain_dedupe_issue")
    num = c.randint(1000, 3000)
    msgs += [act("No open bug matches; filing it.", call("create_issue", {
        "repo": repo, "title": title, "labels": ["bug"],
        "body": f"Reported via assistant. Area: {area}."})),
             msg("tool", jdump({"number": num, "url": f"https://example.com/{repo}/issues/{num}"})),
             msg("assistant", f"Filed #{num}: https://example.com/{repo}/issues/{num}")]
    return tool_record(msgs, tools, 8, "orchestration", "chain_dedupe_issue")


LEDGERS = [("invoices", "amount_eur", "paid"), ("payments", "value_eur", "settled"),
           ("orders", "total_eur", "complete"), ("charges", "gross_eur", "captured"),
           ("receipts", "net_eur", "cleared"), ("transactions", "eur", "posted")]


def revenue_mail(c):
    month = c.randint(1, 12)
    dst = c.choice(["USD", "GBP", "CHF", "SEK"])
    total = round(c.randint(100000, 9000000) / 100, 2)
    got, rate = convert(total, "EUR", dst)
    to = c.picks(PEOPLE, c.randint(1, 2))
    table, col, status = c.pick(LEDGERS)
    dcol = c.pick(["created_at", "booked_at", "posted_on", "issued_at", "settled_at", "paid_at"])
    q = (f"SELECT SUM({col}) AS revenue FROM {table} WHERE status = '{status}' AND "
         f"{dcol} >= DATE '2025-{month:02d}-01' AND {dcol} < DATE '2025-{month:02d}-01' "
         f"+ INTERVAL '1 month'")
    subject = f"Revenue 2025-{month:02d}: {got} {dst}"
    system_turn, tools = system(c, ["sql_query", "convert_currency", "send_email"], c.choice([0, 1]))
    msgs = [system_turn,
            msg("user", c.pick([f"Email {', '.join(to)} the paid revenue for 2025-{month:02d} in "
                                f"{dst} (billing stores euros).", f"Send {' and '.join(to)} last "
                                f"month's paid revenue (month {month}, 2025), converted to {dst}.",
                                f"Revenue report for 2025-{month:02d} in {dst} → mail it to "
                                f"{', '.join(to)}."])),
            act("", call("sql_query", {"database": "billing", "query": q})),
            msg("tool", jdump({"columns": ["revenue"], "rows": [[total]]})),
            act("", call("convert_currency", {"amount": total, "from": "EUR", "to": dst})),
            msg("tool", jdump({"converted": got, "rate": rate, "as_of": "2025-03-14"})),
            act("", call("send_email", {"to": to, "subject": subject, "body":
                                                 f"Paid revenue 2025-{month:02d}: {total} EUR = "
                                                 f"{got} {dst} (rate {rate})."})),
            msg("tool", jdump({"queued": True, "id": f"msg_{c.randint(1000, 9999)}"})),
            msg("assistant", f"Sent to {', '.join(to)}: {total} EUR paid in 2025-{month:02d}, "
                             f"{got} {dst} at {rate}.")]
    return tool_record(msgs, tools, 8, "orchestration", "chain_revenue_mail")


def trip(c):
    """Long chain with a recovered error: misspelt city, then distances and a cost."""
    a, b, d = c.rng.sample(c.part(sorted(CITIES)), 3)
    typo = b[:-1] + b[-1] * 2
    cur = c.choice(["USD", "GBP", "CHF", "SEK", "NOK", "PLN"])
    eur_km = c.choice([0.12, 0.15, 0.18, 0.21])
    k1, k2 = haversine(CITIES[a], CITIES[b]), haversine(CITIES[b], CITIES[d])
    cost = round((k1 + k2) * eur_km, 2)
    got, rate = convert(cost, "EUR", cur)
    geo = lambda x: jdump({"city": x, "lat": CITIES[x][0], "lon": CITIES[x][1]})
    dist = lambda x, y: call("route_distance", {"from_lat": CITIES[x][0], "from_lon": CITIES[x][1],
                                                "to_lat": CITIES[y][0], "to_lon": CITIES[y][1]})
    system_turn, tools = system(c, ["geocode", "route_distance", "convert_currency"], c.choice([0, 2]))
    msgs = [system_turn,
            msg("user", f"Trip {a} → {typo} → {d}. At {eur_km} EUR per km (great-circle), what "
                        f"does it cost in {cur}?"),
            act("", call("geocode", {"city": a}), call("geocode", {"city": typo}),
                call("geocode", {"city": d})),
            msg("tool", geo(a)), msg("tool", jdump({"error": "unknown city", "did_you_mean": [b]})),
            msg("tool", geo(d)),
            act(f"'{typo}' is unknown; the service suggests {b}, which fits the route.",
                call("geocode", {"city": b})),
            msg("tool", geo(b)),
            act("", dist(a, b), dist(b, d)),
            msg("tool", jdump({"km": k1})), msg("tool", jdump({"km": k2})),
            act(f"{k1} + {k2} = {round(k1 + k2, 1)} km × {eur_km} = {cost} EUR.",
                call("convert_currency", {"amount": cost, "from": "EUR", "to": cur})),
            msg("tool", jdump({"converted": got, "rate": rate, "as_of": "2025-03-14"})),
            msg("assistant", f"About {got} {cur}: {a} → {b} {k1} km, {b} → {d} {k2} km, "
                             f"{cost} EUR at {eur_km}/km, converted at {rate}. (I read "
                             f"'{typo}' as {b}.)")]
    return tool_record(msgs, tools, c.choice([9, 10]), "agentic", "chain_trip_recover")


SOURCES = {
    "single_calls": [(3, weather), (3, currency), (2.5, issues), (2.5, sql), (1.5, ambiguous)],
    "chains": [(2.5, distance), (1.5, lambda c: distance(c, True)), (2, meeting),
               (1.5, dedupe_issue), (1.5, revenue_mail), (2.5, trip)],
}
