"""Idiomatic Rust refactors for rust_workspace: trait impls, iterator chains, error types.
Each returns (task, before-or-None, after, why, difficulty); `after` compiles on its own
(the admission check builds it, tests included, in a scratch crate)."""
from __future__ import annotations

from .rust_borrowck import ITEMS, TYPES, snake

FIELDS = [("id", "u32"), ("name", "String"), ("qty", "u32"), ("price_cents", "u64"),
          ("zone", "String"), ("weight_g", "u32"), ("owner", "String"), ("level", "u8"),
          ("code", "String"), ("count", "u64"), ("tag", "String"), ("rank", "u16")]


def fields(c, k):
    return c.rng.sample(FIELDS, k)


def lit(ty: str, c) -> str:
    return f'String::from("{c.choice(["alpha", "delta", "north", "blue", "k9", "r2"])}")' \
        if ty == "String" else str(c.randint(1, 250))


def display(c):
    t, fs = c.pick(TYPES), fields(c, c.randint(2, 3))
    decl = "\n".join(f"    pub {n}: {ty}," for n, ty in fs)
    fmt = " ".join(f"{n}={{}}" for n, _ in fs)
    args = ", ".join(f"self.{n}" for n, _ in fs)
    init = ", ".join(f"{n}: {lit(ty, c)}" for n, ty in fs)
    code = f"""use std::fmt;

pub struct {t} {{
{decl}
}}

impl fmt::Display for {t} {{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {{
        write!(f, "{t}({fmt})", {args})
    }}
}}

#[cfg(test)]
mod tests {{
    use super::*;

    #[test]
    fn shows_every_field() {{
        let v = {t} {{ {init} }};
        assert!(v.to_string().starts_with("{t}("));
    }}
}}"""
    return (f"Implement `Display` for `{t}` so it prints as `{t}({fmt.replace('{}', '…')})`.",
            None, code, "`Display` gives `to_string()` and `{}` formatting for free; `write!` "
            "returns the `fmt::Result` the trait wants.", 4)


def loop_to_iter(c):
    f, v, lim = c.pick(["sum_large", "big_total", "heavy_sum", "sum_over", "total_above",
                        "large_sum"]), c.pick(ITEMS), c.randint(5, 99)
    before = f"""pub fn {f}({v}: &[u32]) -> u64 {{
    let mut total = 0u64;
    for i in 0..{v}.len() {{
        if {v}[i] > {lim} {{
            total += {v}[i] as u64;
        }}
    }}
    total
}}"""
    after = f"""pub fn {f}({v}: &[u32]) -> u64 {{
    {v}.iter().filter(|&&x| x > {lim}).map(|&x| u64::from(x)).sum()
}}"""
    return (f"Make `{f}` idiomatic (no index loop).", before, after,
            "Iterating directly removes the bounds checks and the off-by-one risk of indices; "
            "`u64::from` is a lossless widening, unlike `as`.", 5)


def error_enum(c):
    t = c.pick(TYPES)
    e, s = f"Parse{t}Error", snake(t)
    code = f"""use std::fmt;
use std::num::ParseIntError;

#[derive(Debug)]
pub enum {e} {{
    MissingField(&'static str),
    BadNumber(ParseIntError),
}}

impl fmt::Display for {e} {{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {{
        match self {{
            {e}::MissingField(name) => write!(f, "missing field `{{name}}`"),
            {e}::BadNumber(err) => write!(f, "bad number: {{err}}"),
        }}
    }}
}}

impl std::error::Error for {e} {{
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {{
        match self {{
            {e}::BadNumber(err) => Some(err),
            {e}::MissingField(_) => None,
        }}
    }}
}}

impl From<ParseIntError> for {e} {{
    fn from(err: ParseIntError) -> Self {{
        {e}::BadNumber(err)
    }}
}}

/// Parses `name:qty`, e.g. `bolts:12`.
pub fn parse_{s}(line: &str) -> Result<(String, u32), {e}> {{
    let (name, qty) = line.split_once(':').ok_or({e}::MissingField("qty"))?;
    if name.is_empty() {{
        return Err({e}::MissingField("name"));
    }}
    Ok((name.to_string(), qty.trim().parse()?))
}}"""
    return (f"`parse_{s}` returns `Result<_, String>`; give it a proper error type that keeps "
            f"the `ParseIntError` as its source and works with `?`.", None, code,
            "An enum error lets callers match on the cause; `From<ParseIntError>` is what makes "
            "`?` convert automatically, and `source()` keeps the chain for reporters.", 6)


def iterator(c):
    t = c.pick(["Countdown", "Fib", "StepBy", "Doubling", "Collatz", "Squares"])
    body = {"Countdown": ("n: u32", "if self.n == 0 { return None; }\n        self.n -= 1;\n        Some(self.n + 1)", "u32", "Countdown { n: 3 }", "vec![3, 2, 1]"),
            "Fib": ("a: u64, b: u64", "let out = self.a;\n        self.a = self.b;\n        self.b += out;\n        Some(out)", "u64", "Fib { a: 0, b: 1 }.take(6)", "vec![0, 1, 1, 2, 3, 5]"),
            "StepBy": ("next: u32, step: u32, end: u32", "if self.next >= self.end { return None; }\n        let out = self.next;\n        self.next += self.step;\n        Some(out)", "u32", "StepBy { next: 1, step: 3, end: 10 }", "vec![1, 4, 7]"),
            "Doubling": ("cur: u64, limit: u64", "if self.cur > self.limit { return None; }\n        let out = self.cur;\n        self.cur *= 2;\n        Some(out)", "u64", "Doubling { cur: 1, limit: 20 }", "vec![1, 2, 4, 8, 16]"),
            "Collatz": ("n: u64, done: bool", "if self.done { return None; }\n        let out = self.n;\n        if self.n == 1 { self.done = true; } else if self.n % 2 == 0 { self.n /= 2; } else { self.n = 3 * self.n + 1; }\n        Some(out)", "u64", "Collatz { n: 6, done: false }", "vec![6, 3, 10, 5, 16, 8, 4, 2, 1]"),
            "Squares": ("i: u32, end: u32", "if self.i >= self.end { return None; }\n        self.i += 1;\n        Some(self.i * self.i)", "u32", "Squares { i: 0, end: 4 }", "vec![1, 4, 9, 16]")}[t]
    decl = "\n".join(f"    {x.strip()}," for x in body[0].split(","))
    name = c.pick(["Iter", "Seq", "Gen", "Stream", "Walker", "Source"])
    code = f"""pub struct {t}{name} {{
{decl}
}}

impl Iterator for {t}{name} {{
    type Item = {body[2]};

    fn next(&mut self) -> Option<Self::Item> {{
        {body[1]}
    }}
}}

#[cfg(test)]
mod tests {{
    use super::*;

    #[test]
    fn yields_expected_values() {{
        let got: Vec<_> = {body[3].replace(t, t + name, 1)}.collect();
        assert_eq!(got, {body[4]});
    }}
}}"""
    return (f"Write an `Iterator` (`{t}{name}`) instead of the hand-rolled Vec-building loop.",
            None, code, "Implementing `next` is all it takes: `take`, `map`, `collect` and friends "
                        "come from the trait for free, and values are produced lazily.", 5)


def builder(c):
    t, fs = c.pick(TYPES), fields(c, 3)
    b = f"{t}Builder"
    opts = "\n".join(f"    {n}: Option<{ty}>," for n, ty in fs)
    setters = "\n\n".join(f"    pub fn {n}(mut self, v: {ty}) -> Self {{\n        self.{n} = Some(v);"
                          f"\n        self\n    }}" for n, ty in fs)
    build = ",\n".join(f"            {n}: self.{n}.ok_or(\"{n} is required\")?" for n, _ in fs)
    decl = "\n".join(f"    pub {n}: {ty}," for n, ty in fs)
    code = f"""#[derive(Debug)]
pub struct {t} {{
{decl}
}}

#[derive(Default)]
pub struct {b} {{
{opts}
}}

impl {b} {{
{setters}

    pub fn build(self) -> Result<{t}, &'static str> {{
        Ok({t} {{
{build},
        }})
    }}
}}"""
    return (f"`{t}::new` takes {len(fs)} positional arguments and callers mix them up; add a "
            f"builder that refuses to build with a field missing.", None, code,
            "Consuming setters (`mut self -> Self`) chain without clones, and `build` reports "
            "the first missing field instead of panicking.", 6)


def sort_by(c):
    t, num = c.pick(TYPES), c.pick(["score", "weight", "hits", "votes", "priority", "load"])
    code = f"""#[derive(Debug, Clone)]
pub struct {t} {{
    pub name: String,
    pub {num}: u32,
}}

/// Highest `{num}` first; ties broken by name so the order is deterministic.
pub fn rank_{snake(t)}s(mut items: Vec<{t}>) -> Vec<{t}> {{
    items.sort_by(|a, b| b.{num}.cmp(&a.{num}).then_with(|| a.name.cmp(&b.name)));
    items
}}"""
    return (f"Replace the hand-written bubble sort in `rank_{snake(t)}s` (by `{num}` descending, "
            f"then name) with the standard library.", None, code,
            "`sort_by` is a stable merge sort; chaining `then_with` expresses the tie-break "
            "instead of hiding it in swap conditions.", 4)


def from_str(c):
    t = c.pick(TYPES)
    code = f"""use std::str::FromStr;

#[derive(Debug, PartialEq)]
pub struct {t}Range {{
    pub start: u32,
    pub end: u32,
}}

impl FromStr for {t}Range {{
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {{
        let (a, b) = s.split_once("..").ok_or_else(|| format!("expected START..END, got {{s:?}}"))?;
        let start: u32 = a.trim().parse().map_err(|e| format!("bad start {{a:?}}: {{e}}"))?;
        let end: u32 = b.trim().parse().map_err(|e| format!("bad end {{b:?}}: {{e}}"))?;
        if start > end {{
            return Err(format!("start {{start}} is after end {{end}}"));
        }}
        Ok(Self {{ start, end }})
    }}
}}"""
    return (f"Parse `{t}Range` from strings like `3..17` with `FromStr` instead of the ad-hoc "
            f"`parse_range` that panics on bad input.", None, code,
            "`FromStr` makes `\"3..17\".parse::<{t}Range>()` work, and every failure becomes "
            "an `Err` with the offending text instead of a panic.".replace("{t}", t), 5)


# Order matters: every third entry (error_enum, sort_by) is eval-only (common.Ctx.part).
REFACTORS = [(display, 3), (loop_to_iter, 3), (error_enum, 2), (iterator, 2), (builder, 2),
             (sort_by, 2), (from_str, 2)]


# Library crates written by the workspace tasks (rust.extract_crate): three kinds, so the
# split partition can keep one kind for eval only.
def lib_ids(c, crate):
    t = c.pick(TYPES)
    return f"""//! {crate}: shared id types.
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct {t}Id(pub u64);

impl fmt::Display for {t}Id {{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {{
        write!(f, "{snake(t)}-{{:06}}", self.0)
    }}
}}

impl std::str::FromStr for {t}Id {{
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {{
        s.trim_start_matches("{snake(t)}-").parse().map({t}Id)
    }}
}}"""


def lib_status(c, crate):
    t = c.pick(TYPES)
    states = c.choice([("Pending", "Active", "Closed"), ("Queued", "Running", "Done"),
                       ("Draft", "Published", "Archived")])
    arms = "\n".join(f'            Self::{s} => "{s.lower()}",' for s in states)
    back = "\n".join(f'            "{s.lower()}" => Ok(Self::{s}),' for s in states)
    return f"""//! {crate}: the status type every crate agrees on.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum {t}Status {{
    {states[0]},
    {states[1]},
    {states[2]},
}}

impl {t}Status {{
    pub fn as_str(self) -> &'static str {{
        match self {{
{arms}
        }}
    }}
}}

impl TryFrom<&str> for {t}Status {{
    type Error = String;

    fn try_from(s: &str) -> Result<Self, Self::Error> {{
        match s {{
{back}
            other => Err(format!("unknown {snake(t)} status {{other:?}}")),
        }}
    }}
}}"""


def lib_limits(c, crate):
    t = c.pick(TYPES)
    return f"""//! {crate}: limits shared by the services.

#[derive(Debug, Clone, PartialEq)]
pub struct {t}Limits {{
    pub max_items: usize,
    pub timeout_ms: u64,
    pub retries: u8,
}}

impl Default for {t}Limits {{
    fn default() -> Self {{
        Self {{ max_items: {c.randint(10, 500)}, timeout_ms: {c.randint(100, 9000)}, retries: {c.randint(1, 5)} }}
    }}
}}

impl {t}Limits {{
    /// Batch jobs: half the items, twice the time.
    pub fn for_batch() -> Self {{
        let d = Self::default();
        Self {{ max_items: d.max_items / 2, timeout_ms: d.timeout_ms * 2, ..d }}
    }}
}}"""
