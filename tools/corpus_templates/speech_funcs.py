"""Python function families for speech_to_code: what a speaker asks for (as clean phrases, made
disfluent later), the code, a typed variant, a loop/comprehension pair where one exists, and an
example call whose result the generator obtains by running the code."""
from __future__ import annotations

NOUNS = ["prices", "scores", "temperatures", "distances", "weights", "latencies", "payments",
         "durations", "ratings", "heights", "balances", "readings", "votes", "bids", "fees",
         "salaries", "downloads", "clicks", "orders", "speeds", "ages", "tips", "rents", "calls"]
TEXTS = ["the quick brown fox jumps over the lazy dog", "never odd or even",
         "Was it a car or a cat I saw", "data beats opinions every single time",
         "a stitch in time saves nine", "release early and release often",
         "measure twice and cut once", "Madam in Eden Im Adam", "keep it simple and small",
         "premature optimization is the root of all evil", "Step on no pets",
         "make it work then make it fast"]


def F(name, params, say, code, example, summary, d, typed=None, loop=None, guard=None):
    return dict(name=name, params=params, say=say, code=code, example=example, summary=summary,
                d=d, typed=typed, loop=loop, guard=guard)


def total_tax(c):
    f = c.pick(["total_with_tax", "add_tax", "gross_total", "taxed_sum", "sum_with_tax",
                "checkout_total"])
    p, r = c.pick(NOUNS), c.randint(3, 25)
    xs = [round(c.randint(100, 9999) / 100, 2) for _ in range(c.randint(3, 5))]
    code = f"def {f}({p}, rate={r}):\n    return round(sum({p}) * (1 + rate / 100), 2)"
    typed = (f"def {f}({p}: list[float], rate: float = {r}) -> float:\n"
             f"    return round(sum({p}) * (1 + rate / 100), 2)")
    loop = (f"def {f}({p}, rate={r}):\n    total = 0\n    for x in {p}:\n        total += x\n"
            f"    return round(total * (1 + rate / 100), 2)", code)
    return F(f, [p, "rate"], ["a function", f"called {f}", f"that takes a list of {p}",
                              f"and returns the total with {r} percent tax",
                              "rounded to two decimals"], code, f"{xs}",
             f"sums `{p}` and adds {r}% tax, rounded to cents", 2, typed, loop,
             (f"if not {p}:", "return 0.0", "None", "no prices at all, like None, gives zero"))


def count_vowels(c):
    f = c.pick(["count_vowels", "vowel_count", "num_vowels", "vowels_in", "tally_vowels",
                "how_many_vowels"])
    t = c.pick(["text", "sentence", "phrase"])
    code = f"def {f}({t}):\n    return sum(1 for ch in {t}.lower() if ch in \"aeiou\")"
    loop = (f"def {f}({t}):\n    n = 0\n    for ch in {t}.lower():\n        if ch in \"aeiou\":\n"
            f"            n += 1\n    return n", code)
    return F(f, [t], ["a function", f"named {f}", f"that counts the vowels in a {t}",
                      "upper or lower case"], code, repr(c.pick(TEXTS)),
             f"counts a, e, i, o, u in `{t}`, ignoring case", 1,
             f"def {f}({t}: str) -> int:\n    return sum(1 for ch in {t}.lower() if ch in \"aeiou\")",
             loop, (f"if not {t}:", "return 0", "None", "None should just count as zero"))


def dedupe(c):
    f = c.pick(["dedupe", "unique_in_order", "drop_duplicates", "distinct", "remove_dupes",
                "uniq"])
    p = c.pick(["items", "names", "tags", "ids", "values", "entries"])
    code = (f"def {f}({p}):\n    seen = set()\n    out = []\n    for x in {p}:\n"
            f"        if x not in seen:\n            seen.add(x)\n            out.append(x)\n"
            f"    return out")
    typed = code.replace(f"def {f}({p}):", f"def {f}({p}: list) -> list:")
    comp = f"def {f}({p}):\n    return list(dict.fromkeys({p}))"
    ex = [c.randint(1, 6) for _ in range(c.randint(6, 9))]
    return F(f, [p], ["a function", f"{f}", f"that removes duplicates from a list of {p}",
                      "but keeps the original order"], code, f"{ex}",
             f"drops repeated `{p}`, keeping first occurrences in order", 2, typed, (code, comp),
             (f"if not {p}:", "return []", "None", "if it gets None just return an empty list"))


def chunk(c):
    f = c.pick(["chunk", "batches", "split_every", "chunked", "groups_of", "in_chunks"])
    p, n = c.pick(["items", "rows", "records", "values", "lines", "jobs"]), c.randint(2, 4)
    code = f"def {f}({p}, size={n}):\n    return [{p}[i:i + size] for i in range(0, len({p}), size)]"
    loop = (f"def {f}({p}, size={n}):\n    out = []\n    for i in range(0, len({p}), size):\n"
            f"        out.append({p}[i:i + size])\n    return out", code)
    return F(f, [p, "size"], ["a helper", f"called {f}", f"that splits a list of {p}",
                              f"into chunks of {n}", "the last one can be shorter"], code,
             f"{list(range(1, c.randint(6, 11)))}", f"splits `{p}` into lists of {n}", 3,
             code.replace(f"def {f}({p}, size={n}):", f"def {f}({p}: list, size: int = {n}) -> "
                          f"list[list]:"), loop, None)


def clamp(c):
    f = c.pick(["clamp", "bounded", "limit_to", "clip", "keep_in_range", "constrain"])
    lo, hi = c.randint(0, 20), c.randint(50, 100)
    code = f"def {f}(value, low={lo}, high={hi}):\n    return max(low, min(value, high))"
    loop = (f"def {f}(value, low={lo}, high={hi}):\n    if value < low:\n        return low\n"
            f"    if value > high:\n        return high\n    return value", code)
    return F(f, ["value", "low", "high"], ["a function", f"{f}", "that clamps a number",
                                           f"between {lo} and {hi}"], code,
             f"{c.randint(-50, 150)}", f"limits a value to [{lo}, {hi}]", 1,
             code.replace(f"def {f}(value, low={lo}, high={hi}):",
                          f"def {f}(value: float, low: float = {lo}, high: float = {hi}) -> float:"),
             loop, None)


def to_f(c):
    f = c.pick(["c_to_f", "celsius_to_fahrenheit", "to_fahrenheit", "fahrenheit", "convert_temp",
                "c2f"])
    code = f"def {f}(celsius):\n    return round(celsius * 9 / 5 + 32, 1)"
    ex = [c.randint(-20, 40) for _ in range(3)]
    return F(f, ["celsius"], ["a function", f"called {f}", "that converts celsius to fahrenheit",
                              "to one decimal"], code, f"{ex[0]}",
             "converts °C to °F, one decimal", 1,
             f"def {f}(celsius: float) -> float:\n    return round(celsius * 9 / 5 + 32, 1)",
             None, None)


def palindrome(c):
    f = c.pick(["is_palindrome", "palindrome", "reads_same_backwards", "is_pal", "mirror_text",
                "check_palindrome"])
    t = c.pick(["text", "phrase", "s"])
    code = (f"def {f}({t}):\n    cleaned = [ch.lower() for ch in {t} if ch.isalnum()]\n"
            f"    return cleaned == cleaned[::-1]")
    loop = (f"def {f}({t}):\n    cleaned = []\n    for ch in {t}:\n        if ch.isalnum():\n"
            f"            cleaned.append(ch.lower())\n    return cleaned == cleaned[::-1]", code)
    return F(f, [t], ["a function", f"{f}", f"that checks if a {t} is a palindrome",
                      "ignoring spaces and case"], code, repr(c.pick(TEXTS)),
             "True when the letters and digits read the same both ways, ignoring case", 3,
             code.replace(f"def {f}({t}):", f"def {f}({t}: str) -> bool:"), loop,
             (f"if not {t}:", "return False", "None", "None or empty is not a palindrome"))


def top_words(c):
    f = c.pick(["top_words", "most_common_words", "word_counts", "frequent_words", "top_terms",
                "common_words"])
    k = c.randint(2, 4)
    code = (f"from collections import Counter\n\n\ndef {f}(text, k={k}):\n"
            f"    return Counter(text.lower().split()).most_common(k)")
    return F(f, ["text", "k"], ["a function", f"{f}", "that returns the most common words",
                                f"in a string, the top {k}", "with their counts"], code,
             repr(c.pick(TEXTS) + " " + c.pick(TEXTS)), f"the {k} most frequent words with counts",
             4, code.replace(f"def {f}(text, k={k}):",
                             f"def {f}(text: str, k: int = {k}) -> list[tuple[str, int]]:"),
             None, ("if not text:", "return []", "None", "no text means an empty list"))


def moving_avg(c):
    f = c.pick(["moving_average", "rolling_mean", "smooth", "window_avg", "running_mean",
                "sliding_average"])
    p, w = c.pick(NOUNS), c.randint(2, 4)
    code = (f"def {f}({p}, window={w}):\n    return [sum({p}[i:i + window]) / window\n"
            f"            for i in range(len({p}) - window + 1)]")
    loop = (f"def {f}({p}, window={w}):\n    out = []\n    for i in range(len({p}) - window + 1):\n"
            f"        out.append(sum({p}[i:i + window]) / window)\n    return out", code)
    ex = [c.randint(1, 40) for _ in range(c.randint(5, 8))]
    return F(f, [p, "window"], ["a function", f"called {f}", f"over a list of {p}",
                                f"with a window of {w}", "returning the averages"], code,
             f"{ex}", f"averages each run of {w} consecutive `{p}`", 5,
             code.replace(f"def {f}({p}, window={w}):",
                          f"def {f}({p}: list[float], window: int = {w}) -> list[float]:"),
             loop, None)


def above(c):
    f = c.pick(["above_threshold", "passing", "who_passed", "high_scorers", "over_limit",
                "filter_above"])
    p, t = c.pick(["scores", "grades", "marks", "points", "results", "tallies"]), c.randint(50, 80)
    names = c.picks(["ana", "bo", "cyd", "dee", "eli", "fay", "gus", "hal", "ivy", "jo", "kit",
                     "lu", "max", "ned", "ola"], 4)
    ex = {n: c.randint(30, 99) for n in names}
    code = f"def {f}({p}, cutoff={t}):\n    return sorted(name for name, s in {p}.items() if s > cutoff)"
    loop = (f"def {f}({p}, cutoff={t}):\n    out = []\n    for name, s in {p}.items():\n"
            f"        if s > cutoff:\n            out.append(name)\n    return sorted(out)", code)
    return F(f, [p, "cutoff"], ["a function", f"{f}", f"that takes a dict of {p} by name",
                                f"and gives back the names above {t}", "sorted"], code, f"{ex}",
             f"names whose score is over {t}, alphabetical", 3,
             code.replace(f"def {f}({p}, cutoff={t}):",
                          f"def {f}({p}: dict[str, int], cutoff: int = {t}) -> list[str]:"),
             loop, None)


def hms(c):
    f = c.pick(["format_duration", "to_hms", "hms", "seconds_to_clock", "pretty_time",
                "clock_string"])
    code = (f"def {f}(seconds):\n    h, rest = divmod(int(seconds), 3600)\n"
            f"    m, s = divmod(rest, 60)\n    return f\"{{h}}:{{m:02d}}:{{s:02d}}\"")
    return F(f, ["seconds"], ["a function", f"named {f}", "that turns seconds into",
                              "hours colon minutes colon seconds", "with two digit minutes"],
             code, f"{c.randint(59, 40000)}", "formats seconds as H:MM:SS", 3,
             code.replace(f"def {f}(seconds):", f"def {f}(seconds: int) -> str:"), None, None)


def parse_kv(c):
    f = c.pick(["parse_pairs", "parse_settings", "kv_to_dict", "parse_kv", "read_options",
                "split_pairs"])
    sep = c.choice([";", ","])
    keys = c.picks(["host", "port", "user", "mode", "level", "region", "zone", "tier", "env"], 3)
    ex = sep.join(f"{k}={c.randint(1, 99)}" for k in keys)
    code = (f"def {f}(text):\n    pairs = (part.split(\"=\", 1) for part in text.split(\"{sep}\") "
            f"if \"=\" in part)\n    return {{k.strip(): v.strip() for k, v in pairs}}")
    return F(f, ["text"], ["a function", f"{f}", "that parses a string like",
                           f"key equals value separated by {'semicolons' if sep == ';' else 'commas'}",
                           "into a dict"], code, repr(ex), "parses `k=v` pairs into a dict", 4,
             code.replace(f"def {f}(text):", f"def {f}(text: str) -> dict[str, str]:"), None,
             ("if not text:", "return {}", "None", "None should give an empty dict"))


def median(c):
    f = c.pick(["median", "middle_value", "med", "median_of", "find_median", "mid"])
    p = c.pick(NOUNS)
    code = (f"def {f}({p}):\n    ordered = sorted({p})\n    n = len(ordered)\n    mid = n // 2\n"
            f"    if n % 2:\n        return ordered[mid]\n    return (ordered[mid - 1] + ordered[mid]) / 2")
    ex = [c.randint(1, 99) for _ in range(c.randint(4, 7))]
    return F(f, [p], ["a function", f"{f}", f"that gives the median of a list of {p}",
                      "averaging the middle two if the count is even"], code, f"{ex}",
             f"the median of `{p}`", 4,
             code.replace(f"def {f}({p}):", f"def {f}({p}: list[float]) -> float:"), None,
             (f"if not {p}:", "return None", "[]", "an empty list should give None"))


def initials(c):
    f = c.pick(["initials", "monogram", "name_initials", "abbreviate", "short_name", "first_letters"])
    code = f"def {f}(full_name):\n    return \"\".join(part[0].upper() + \".\" for part in full_name.split())"
    loop = (f"def {f}(full_name):\n    out = \"\"\n    for part in full_name.split():\n"
            f"        out += part[0].upper() + \".\"\n    return out", code)
    who = " ".join(c.picks(["ada", "lovelace", "grace", "hopper", "alan", "turing", "barbara",
                            "liskov", "edsger", "dijkstra", "katherine", "johnson"], 2))
    return F(f, ["full_name"], ["a function", f"called {f}", "that takes a full name",
                                "and returns the initials with dots"], code, repr(who),
             "upper-case initials, each followed by a dot", 2,
             code.replace(f"def {f}(full_name):", f"def {f}(full_name: str) -> str:"), loop, None)


def pct_change(c):
    f = c.pick(["percent_change", "pct_change", "growth", "change_pct", "delta_percent", "rel_change"])
    code = (f"def {f}(old, new):\n    if old == 0:\n        raise ValueError(\"old value is zero\")\n"
            f"    return round((new - old) / old * 100, 1)")
    return F(f, ["old", "new"], ["a function", f"{f}", "for the percent change",
                                 "from an old value to a new one", "one decimal",
                                 "and it should complain if the old value is zero"],
             code, f"{c.randint(10, 500)}, {c.randint(10, 500)}", "percent change, one decimal", 4,
             code.replace(f"def {f}(old, new):", f"def {f}(old: float, new: float) -> float:"),
             None, None)


def second_largest(c):
    f = c.pick(["second_largest", "runner_up", "second_best", "next_biggest", "silver", "penultimate_max"])
    p = c.pick(NOUNS)
    code = (f"def {f}({p}):\n    distinct = sorted(set({p}), reverse=True)\n"
            f"    return distinct[1] if len(distinct) > 1 else None")
    ex = [c.randint(1, 30) for _ in range(c.randint(4, 8))]
    return F(f, [p], ["a function", f"{f}", f"that finds the second largest of the {p}",
                      "ignoring duplicates", "and None if there isn't one"], code, f"{ex}",
             "the second-largest distinct value, or None", 5,
             code.replace(f"def {f}({p}):", f"def {f}({p}: list[int]) -> int | None:"), None, None)


FAMILIES = [total_tax, count_vowels, dedupe, chunk, clamp, to_f, palindrome, top_words,
            moving_avg, above, hms, parse_kv, median, initials, pct_change, second_largest]
