"""Vox program families: each returns a complete, runnable program with its task, difficulty,
and optional bugs (correct fragment, plausible wrong fragment) for the debugging templates.
Every identifier is drawn from a split-partitioned pool so eval programs share no names with
training programs (see common.Ctx.pick)."""
from __future__ import annotations

import math

from .voxrun import fmt

LISTS = ["scores", "prices", "temps", "ages", "weights", "distances", "votes", "steps", "pages",
         "orders", "tickets", "readings", "lengths", "heights", "bids", "loads", "counts",
         "marks", "speeds", "depths", "rainfall", "laps", "sales", "tips", "doses", "pulses",
         "yields", "visits", "quotas", "ratings"]
WORDS = ["amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "harbor", "iris",
         "juniper", "kestrel", "lumen", "maple", "nectar", "orbit", "pylon", "quartz", "raven",
         "sierra", "tundra", "umber", "vale", "willow", "xenon", "yarrow", "zephyr", "basalt",
         "cobalt", "dune", "flint", "garnet", "heron", "indigo", "jasper", "krill", "lotus"]
ACC = ["total", "acc", "running", "subtotal", "tally", "sum_so_far", "kept", "gathered", "pile"]
LIM = ["limit", "cutoff", "floor", "threshold", "bar", "minimum", "edge", "lower", "gate"]
VAR = ["x", "v", "item", "n", "el", "val", "cur", "entry", "elem"]
IDX = ["i", "j", "pos", "idx", "at", "slot", "cursor", "ix", "mark"]
PARAM = ["values", "items", "nums", "xs", "data", "series", "seq", "batch", "list_in"]
BEST = ["best", "top", "peak", "champion", "highest", "record", "leader", "biggest", "max_seen"]


def lit(xs) -> str:
    return fmt(list(xs))


def nums(c, lo=0, hi=60, k=(5, 9)):
    return [c.randint(lo, hi) for _ in range(c.randint(*k))]


def sum_above(c):
    f = c.pick(["total_above", "sum_over", "add_above", "above_sum", "sum_beyond", "tally_above"])
    xs, p, acc, lim, v = c.pick(LISTS), c.pick(PARAM), c.pick(ACC), c.pick(LIM), c.pick(VAR)
    cut, data = c.randint(5, 40), nums(c)
    src = f"""fn {f}({p}, {lim}) {{
  let {acc} = 0;
  for {v} in {p} {{
    if {v} > {lim} {{
      {acc} = {acc} + {v};
    }}
  }}
  return {acc};
}}
let {xs} = {lit(data)};
print("{xs} above {cut}: " + str({f}({xs}, {cut})));"""
    return dict(task=f"adds up the {xs} strictly greater than {cut}", src=src, d=4, fn=f,
                bugs=[(f"{v} > {lim}", f"{v} >= {lim}")])


def count_word(c):
    f = c.pick(["count_of", "occurrences", "how_many", "count_word", "tally_word", "freq_of"])
    words = c.picks(WORDS, 4)
    data = [c.choice(words) for _ in range(c.randint(6, 10))]
    target, p, n, v = c.choice(words), c.pick(PARAM), c.pick(ACC), c.pick(VAR)
    src = f"""fn {f}({p}, wanted) {{
  let {n} = 0;
  for {v} in {p} {{
    if {v} == wanted {{
      {n} = {n} + 1;
    }}
  }}
  return {n};
}}
let names = {lit(data)};
print(str({f}(names, "{target}")) + " x {target}");"""
    return dict(task=f'counts how often "{target}" appears in a list of names', src=src, d=4,
                fn=f, bugs=[(f"{n} = {n} + 1;", f"{n} = 1;")])


def max_index(c):
    f = c.pick(["index_of_max", "argmax", "where_largest", "max_at", "largest_pos", "peak_index"])
    xs, p, i, b = c.pick(LISTS), c.pick(PARAM), c.pick(IDX), c.pick(BEST)
    data = nums(c, 1, 99)
    w = c.pick(["where", "found_at", "k", "spot", "loc", "hit"])
    label, at = c.pick([(f"largest of {xs} is ", "at index "), (f"max {xs}: ", "@ "),
                        (f"{xs} peak ", "position "), (f"biggest in {xs}: ", "at "),
                        (f"top {xs} value ", "idx "), (f"{xs} maximum ", "found at ")])
    src = f"""fn {f}({p}) {{
  let {b} = 0;
  let {i} = 1;
  while {i} < len({p}) {{
    if {p}[{i}] > {p}[{b}] {{
      {b} = {i};
    }}
    {i} = {i} + 1;
  }}
  return {b};
}}
let {xs} = {lit(data)};
let {w} = {f}({xs});
print("{label}" + str({xs}[{w}]) + " {at}" + str({w}));"""
    return dict(task=f"finds the position of the largest of the {xs}", src=src, d=5, fn=f,
                bugs=[(f"while {i} < len({p})", f"while {i} < len({p}) - 1")])


def fizz(c):
    a, b = c.choice([(2, 5), (3, 5), (3, 7), (4, 6), (2, 7), (5, 7), (3, 4)])
    wa, wb = c.picks(["fizz", "buzz", "ping", "pong", "tick", "tock", "zap", "boom", "hop"], 2)
    top, v = c.randint(12, 24), c.pick(VAR)
    src = f"""for {v} in range(1, {top + 1}) {{
  if {v} % {math.lcm(a, b)} == 0 {{
    print("{wa}{wb}");
  }} else if {v} % {a} == 0 {{
    print("{wa}");
  }} else if {v} % {b} == 0 {{
    print("{wb}");
  }} else {{
    print(str({v}));
  }}
}}"""
    return dict(task=f'prints 1 to {top}, "{wa}" for multiples of {a}, "{wb}" for multiples of '
                f'{b} and "{wa}{wb}" for both', src=src, d=5, fn=None,
                bugs=[(f"range(1, {top + 1})", f"range(1, {top})")])


def fib(c):
    f = c.pick(["fib", "fibonacci", "nth_fib", "fib_at", "golden_step", "fib_iter"])
    k, a, b, i = c.randint(8, 25), c.pick(["a", "prev", "lo"]), c.pick(["b", "curr", "hi"]), \
        c.pick(IDX)
    src = f"""fn {f}(k) {{
  let {a} = 0;
  let {b} = 1;
  let {i} = 0;
  while {i} < k {{
    let next = {a} + {b};
    {a} = {b};
    {b} = next;
    {i} = {i} + 1;
  }}
  return {a};
}}
print("{f}({k}) = " + str({f}({k})));"""
    return dict(task=f"computes the {k}th Fibonacci number iteratively (fib(0) = 0)", src=src,
                d=5, fn=f, bugs=[(f"while {i} < k", f"while {i} <= k")])


def gcd(c):
    f = c.pick(["gcd", "common_divisor", "euclid", "hcf", "greatest_divisor", "gcd_of"])
    g = c.pick(["lcm", "least_multiple", "lcm_of"])
    x, y = c.randint(12, 240), c.randint(12, 240)
    a, b = c.pick([("a", "b"), ("x", "y"), ("m", "n"), ("p", "q"), ("lhs", "rhs"), ("u", "w")])
    r = c.pick(["r", "rem", "rest"])
    src = f"""fn {f}({a}, {b}) {{
  while {b} != 0 {{
    let {r} = {a} % {b};
    {a} = {b};
    {b} = {r};
  }}
  return {a};
}}
fn {g}({a}, {b}) {{
  return {a} / {f}({a}, {b}) * {b};
}}
print("{f} = " + str({f}({x}, {y})) + ", {g} = " + str({g}({x}, {y})));"""
    return dict(task=f"prints the greatest common divisor and least common multiple of {x} and {y}",
                src=src, d=5, fn=f, bugs=[(f"return {a};", f"return {b};")])


def primes(c):
    f = c.pick(["primes_upto", "sieve", "list_primes", "primes_below", "prime_list", "find_primes"])
    top, v, d = c.randint(20, 99), c.pick(VAR), c.pick(["d", "div", "k"])
    out = c.pick(["found_primes", "ps", "plist", "hits", "got", "prime_set"])
    src = f"""fn is_prime({v}) {{
  if {v} < 2 {{
    return false;
  }}
  let {d} = 2;
  while {d} * {d} <= {v} {{
    if {v} % {d} == 0 {{
      return false;
    }}
    {d} = {d} + 1;
  }}
  return true;
}}
fn {f}(top) {{
  let found = [];
  for {v} in range(2, top + 1) {{
    if is_prime({v}) {{
      push(found, {v});
    }}
  }}
  return found;
}}
let {out} = {f}({top});
print(str(len({out})) + " primes up to {top}, the largest " + str({out}[len({out}) - 1]));"""
    return dict(task=f"counts the primes up to {top} and shows the largest", src=src, d=6, fn=f,
                bugs=[(f"while {d} * {d} <= {v}", f"while {d} * {d} < {v}")])


def reverse(c):
    f = c.pick(["reversed", "flip", "backwards", "reverse_list", "mirror", "rev"])
    words, p, i = c.picks(WORDS, c.randint(4, 7)), c.pick(PARAM), c.pick(IDX)
    src = f"""fn {f}({p}) {{
  let out = [];
  let {i} = len({p}) - 1;
  while {i} >= 0 {{
    push(out, {p}[{i}]);
    {i} = {i} - 1;
  }}
  return out;
}}
print(join({f}({lit(words)}), ", "));"""
    return dict(task="reverses a list of words and prints them comma-separated", src=src, d=5,
                fn=f, bugs=[(f"while {i} >= 0", f"while {i} > 0")])


def insertion_sort(c):
    f = c.pick(["insertion_sort", "sort_in_place", "sort_asc", "isort", "order_up", "sort_nums"])
    xs, p, i, j = c.pick(LISTS), c.pick(PARAM), *c.picks(IDX, 2)
    data = nums(c, 1, 99, (6, 9))
    src = f"""fn {f}({p}) {{
  let {i} = 1;
  while {i} < len({p}) {{
    let key = {p}[{i}];
    let {j} = {i} - 1;
    while {j} >= 0 and {p}[{j}] > key {{
      {p}[{j} + 1] = {p}[{j}];
      {j} = {j} - 1;
    }}
    {p}[{j} + 1] = key;
    {i} = {i} + 1;
  }}
  return {p};
}}
let {xs} = {lit(data)};
print(str({f}({xs})));"""
    return dict(task=f"sorts the {xs} in ascending order with insertion sort", src=src, d=7, fn=f,
                bugs=[(f"while {j} >= 0 and", f"while {j} > 0 and")])


def binary_search(c):
    f = c.pick(["bsearch", "find_sorted", "binary_find", "locate", "search_sorted", "seek"])
    data = sorted(set(nums(c, 1, 99, (7, 11))))
    target = c.choice(data) if c.chance(0.7) else c.randint(1, 99)
    lo, hi, mid = c.pick(["lo", "low", "left"]), c.pick(["hi", "high", "right"]), \
        c.pick(["mid", "middle", "half"])
    src = f"""fn {f}(sorted, wanted) {{
  let {lo} = 0;
  let {hi} = len(sorted) - 1;
  while {lo} <= {hi} {{
    let {mid} = ({lo} + {hi}) / 2;
    if sorted[{mid}] == wanted {{
      return {mid};
    }} else if sorted[{mid}] < wanted {{
      {lo} = {mid} + 1;
    }} else {{
      {hi} = {mid} - 1;
    }}
  }}
  return -1;
}}
print(str({f}({lit(data)}, {target})));"""
    return dict(task=f"binary-searches a sorted list for {target}, printing its index or -1",
                src=src, d=7, fn=f, bugs=[(f"while {lo} <= {hi}", f"while {lo} < {hi}")])


def running(c):
    f = c.pick(["running_totals", "prefix_sums", "cumulative", "accumulate", "scan_sum", "totals"])
    xs, p, acc, v = c.pick(LISTS), c.pick(PARAM), c.pick(ACC), c.pick(VAR)
    src = f"""fn {f}({p}) {{
  let out = [];
  let {acc} = 0;
  for {v} in {p} {{
    {acc} = {acc} + {v};
    push(out, {acc});
  }}
  return out;
}}
let {xs} = {lit(nums(c, 1, 30))};
print(str({f}({xs})));"""
    return dict(task=f"prints the running totals of the {xs}", src=src, d=5, fn=f,
                bugs=[(f"push(out, {acc});\n", f"push(out, {v});\n")])


def collatz(c):
    f = c.pick(["collatz_steps", "steps_to_one", "hailstone", "collatz_len", "orbit_len", "chain"])
    start, n, s = c.randint(6, 97), c.pick(VAR), c.pick(["steps", "hops", "moves"])
    src = f"""fn {f}({n}) {{
  let {s} = 0;
  while {n} != 1 {{
    if {n} % 2 == 0 {{
      {n} = {n} / 2;
    }} else {{
      {n} = 3 * {n} + 1;
    }}
    {s} = {s} + 1;
  }}
  return {s};
}}
print("{start} reaches 1 after " + str({f}({start})) + " steps");"""
    return dict(task=f"counts the Collatz steps from {start} down to 1", src=src, d=6, fn=f,
                bugs=[(f"{n} = 3 * {n} + 1;", f"{n} = 3 * {n};")])


def longest(c):
    f = c.pick(["longest", "longest_word", "widest", "max_len_word", "biggest_word", "long_one"])
    words, b, v = c.picks(WORDS, c.randint(5, 8)), c.pick(BEST), c.pick(VAR)
    src = f"""fn {f}(words) {{
  let {b} = "";
  for {v} in words {{
    if len({v}) > len({b}) {{
      {b} = {v};
    }}
  }}
  return {b};
}}
print({f}({lit(words)}));"""
    return dict(task="prints the longest word of a list (the first one on ties)", src=src, d=5,
                fn=f, bugs=[(f"len({v}) > len({b})", f"len({v}) >= len({b})")])


def row_sums(c):
    f = c.pick(["row_sums", "sum_rows", "row_totals", "per_row", "line_sums", "rowwise"])
    rows = [[c.randint(0, 9) for _ in range(3)] for _ in range(c.randint(3, 5))]
    r, v, acc = c.pick(["row", "line", "rec"]), c.pick(VAR), c.pick(ACC)
    src = f"""fn {f}(grid) {{
  let out = [];
  for {r} in grid {{
    let {acc} = 0;
    for {v} in {r} {{
      {acc} = {acc} + {v};
    }}
    push(out, {acc});
  }}
  return out;
}}
let grid = {lit(rows)};
print(str({f}(grid)));"""
    return dict(task="sums each row of a small grid (a list of lists)", src=src, d=6, fn=f,
                bugs=[(f"  for {r} in grid {{\n    let {acc} = 0;", f"  let {acc} = 0;\n  for {r} in grid {{")])


def histogram(c):
    f = c.pick(["bar", "stars", "draw_bar", "bar_of", "make_bar", "row_of"])
    xs, ch, i = c.pick(LISTS), c.choice(["*", "#", "="]), c.pick(IDX)
    data = nums(c, 1, 9, (3, 6))
    src = f"""fn {f}(width) {{
  let s = "";
  let {i} = 0;
  while {i} < width {{
    s = s + "{ch}";
    {i} = {i} + 1;
  }}
  return s;
}}
let {xs} = {lit(data)};
for w in {xs} {{
  print(str(w) + " " + {f}(w));
}}"""
    return dict(task=f"draws a text histogram of the {xs}, one '{ch}' per unit", src=src, d=6,
                fn=f, bugs=[(f"{i} = {i} + 1;", f"{i} = {i} + 2;")])


FAMILIES = [sum_above, count_word, max_index, fizz, fib, gcd, primes, reverse, insertion_sort,
            binary_search, running, collatz, longest, row_sums, histogram]
