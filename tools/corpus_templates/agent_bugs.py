"""Bugs for agent_harness's simulated repositories. Each is a real Python function with a real
defect and a test; the pytest output quoted in a transcript is built from the value the buggy
code actually returns (the generator executes it), so the failure shown is the failure you
would get."""
from __future__ import annotations

BUGS = {
    "paginate": dict(
        src="def paginate(items, page, size):\n    \"\"\"Return page `page` (1-based) of `items`.\"\"\"\n"
            "    return items[page * size:(page + 1) * size]\n",
        old="    return items[page * size:(page + 1) * size]",
        new="    return items[(page - 1) * size:page * size]",
        test=lambda c: (f"paginate(list(range({(n := c.randint(7, 20))})), page=1, size={(s := c.randint(2, 5))})",
                        list(range(n))[:s]),
        why="pages are 1-based but the slice treats them as 0-based, so every page is shifted by one"),
    "is_leap": dict(
        src="def is_leap(year):\n    return year % 4 == 0 and year % 100 != 0\n",
        old="    return year % 4 == 0 and year % 100 != 0",
        new="    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)",
        test=lambda c: (f"is_leap({c.choice([1600, 2000, 2400])})", True),
        why="the Gregorian rule has a third clause: centuries divisible by 400 are leap years"),
    "mean": dict(
        src="def mean(values):\n    return sum(values) // len(values)\n",
        old="    return sum(values) // len(values)",
        new="    return sum(values) / len(values)",
        test=lambda c: (f"mean([{(a := c.randint(1, 9))}, {a + 2 * c.randint(0, 3) + 1}])", None),
        why="`//` floors, so any mean that is not a whole number is truncated"),
    "slugify": dict(
        src="import re\n\n\ndef slugify(text):\n    return re.sub(r\"[^a-z0-9]+\", \"-\", text).strip(\"-\")\n",
        old="    return re.sub(r\"[^a-z0-9]+\", \"-\", text).strip(\"-\")",
        new="    return re.sub(r\"[^a-z0-9]+\", \"-\", text.lower()).strip(\"-\")",
        test=lambda c: (f"slugify({c.choice(['Hello World', 'Release Notes 2', 'Big Data Day', 'Q3 Report', 'New API Keys'])!r})", None),
        why="the character class only keeps lower-case letters, so capitals are replaced instead of lowered"),
    "retry_calls": dict(
        src="def retry_calls(fn, retries):\n    \"\"\"Call fn once, then up to `retries` more times while it fails.\"\"\"\n"
            "    calls = 0\n    for _ in range(retries):\n        calls += 1\n        if fn():\n"
            "            break\n    return calls\n",
        old="    for _ in range(retries):",
        new="    for _ in range(retries + 1):",
        test=lambda c: (f"retry_calls(lambda: False, retries={c.randint(1, 6)})", None),
        why="the first attempt is not a retry: the loop must run `retries + 1` times"),
    "parse_duration": dict(
        src="import re\n\n\ndef parse_duration(text):\n    \"\"\"'1h30m' -> seconds.\"\"\"\n"
            "    units = {\"h\": 3600, \"m\": 3600, \"s\": 1}\n"
            "    return sum(int(n) * units[u] for n, u in re.findall(r\"(\\d+)([hms])\", text))\n",
        old="    units = {\"h\": 3600, \"m\": 3600, \"s\": 1}",
        new="    units = {\"h\": 3600, \"m\": 60, \"s\": 1}",
        test=lambda c: (f"parse_duration('{c.randint(1, 5)}h{c.randint(1, 59)}m')", None),
        why="minutes are multiplied by 3600 instead of 60"),
    "clamp": dict(
        src="def clamp(x, lo, hi):\n    return max(hi, min(x, lo))\n",
        old="    return max(hi, min(x, lo))",
        new="    return max(lo, min(x, hi))",
        test=lambda c: (f"clamp({c.randint(11, 49)}, 10, 50)", None),
        why="`lo` and `hi` are swapped, so every value clamps to `hi`"),
    "last_chunk": dict(
        src="def chunks(xs, size):\n    return [xs[i:i + size] for i in range(0, len(xs) - size, size)]\n",
        old="    return [xs[i:i + size] for i in range(0, len(xs) - size, size)]",
        new="    return [xs[i:i + size] for i in range(0, len(xs), size)]",
        test=lambda c: (f"chunks(list(range({(n := c.randint(5, 12))})), {(s := c.randint(2, 4))})",
                        None),
        why="the range stops `size` early, dropping the last chunk (and a full final one too)"),
    "merge_counts": dict(
        src="def merge_counts(a, b):\n    out = dict(a)\n    out.update(b)\n    return out\n",
        old="    out.update(b)",
        new="    for k, v in b.items():\n        out[k] = out.get(k, 0) + v",
        test=lambda c: (f"merge_counts({{'x': {c.randint(1, 9)}, 'y': 1}}, {{'x': {c.randint(1, 9)}}})",
                        None),
        why="`update` replaces counts for shared keys instead of adding them"),
}
MODULES = {"paginate": "pages", "is_leap": "calendar_utils", "mean": "stats", "slugify": "text",
           "retry_calls": "retry", "parse_duration": "durations", "clamp": "numeric",
           "last_chunk": "batching", "merge_counts": "counters"}


def evaluate(src: str, call: str):
    ns: dict = {}
    exec(src, ns)                      # generator-owned bug bank, not user input
    return eval(call, ns)


def case(c, name: str):
    """(bug, call, actual value from the buggy code, expected value from the fixed code)."""
    bug = BUGS[name]
    call, _ = bug["test"](c)
    fixed = bug["src"].replace(bug["old"], bug["new"])
    got, want = evaluate(bug["src"], call), evaluate(fixed, call)
    if got == want:
        raise RuntimeError(f"agent bug {name}: {call} does not expose the bug")
    return bug, call, got, want, fixed


def pytest_fail(test_file: str, test_name: str, call: str, got, want, passed: int) -> str:
    bar = "_" * ((78 - len(test_name) - 2) // 2)
    return (f"{'F' + '.' * passed:<72}[100%]\n"
            f"{'=' * 35} FAILURES {'=' * 35}\n{bar} {test_name} {bar}\n\n"
            f"    def {test_name}():\n>       assert {call} == {want!r}\n"
            f"E       assert {got!r} == {want!r}\n\n{test_file}:{7 + passed}: AssertionError\n"
            f"{'=' * 28} short test summary info {'=' * 28}\n"
            f"FAILED {test_file}::{test_name} - assert {got!r} == {want!r}\n"
            f"1 failed, {passed} passed in {(passed + 2) / 100:.2f}s")


def pytest_pass(n: int) -> str:
    return f"{'.' * n:<72}[100%]\n{n} passed in {(n + 1) / 100:.2f}s"
