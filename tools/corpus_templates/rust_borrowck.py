"""Borrow-checker cases for rust_workspace: (broken, error code, message, fixed, why, difficulty).
The fixed code must pass `cargo check` (the admission check); when cargo is present the
generator also confirms each broken snippet fails with exactly the claimed error code."""
from __future__ import annotations

TYPES = ["Invoice", "Ledger", "Sensor", "Shipment", "Playlist", "Inventory", "Ticket", "Route",
         "Parcel", "Reactor", "Vault", "Garden", "Fleet", "Recipe", "Budget", "Mailbox",
         "Station", "Cohort", "Harbor", "Quiver", "Beacon", "Orchard", "Turbine", "Archive"]
ITEMS = ["weights", "scores", "readings", "amounts", "totals", "counts", "samples", "ticks",
         "prices", "levels", "offsets", "deltas", "marks", "ranks", "loads", "spans", "votes",
         "bids"]
LABELS = ["sensor-7", "north-gate", "batch-42", "invoice-2024-11", "route-A3", "pump-room",
          "vault-9", "tray-5", "dock-3", "zone-B", "line-12", "bay-4", "cell-8", "rack-2",
          "pier-6"]


def snake(name: str) -> str:
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in name).lstrip("_")


def moved_vec(c):
    f, v = c.pick(["total_of", "sum_all", "add_up", "tally", "grand_total", "aggregate"]), c.pick(ITEMS)
    vals = ", ".join(str(c.randint(1, 90)) for _ in range(c.randint(3, 6)))
    body = lambda sig, arg: f"""fn {f}({sig}) -> u32 {{
    {v}.iter().sum()
}}

pub fn report() -> String {{
    let {v} = vec![{vals}];
    let total = {f}({arg});
    format!("{{}} {v}, total {{}}", {v}.len(), total)
}}"""
    return (body(f"{v}: Vec<u32>", v), "E0382", f"borrow of moved value: `{v}`",
            body(f"{v}: &[u32]", f"&{v}"),
            f"`{f}` takes the `Vec` by value, so the call moves `{v}` and the later `{v}.len()` "
            f"reads a moved value. It only reads the numbers, so borrow a slice (`&[u32]`) "
            f"instead of cloning.", 3)


def push_while_borrowed(c):
    f, v = c.pick(["first_then_push", "head_and_add", "peek_push", "take_first", "log_first",
                   "first_or_extra"]), c.pick(ITEMS)
    extra = c.pick(LABELS)
    body = lambda get: f"""pub fn {f}({v}: &mut Vec<String>) -> String {{
    let first = {get};
    {v}.push(String::from("{extra}"));
    first
}}"""
    broken = body(f"&{v}[0]").replace("    first\n}", "    first.clone()\n}")
    return (broken, "E0502",
            f"cannot borrow `*{v}` as mutable because it is also borrowed as immutable",
            body(f"{v}[0].clone()"),
            f"`first` borrows into the vector and `push` may reallocate it, which would leave "
            f"`first` dangling. Clone the element before pushing (or push after the last use "
            f"of `first`).", 4)


def two_mut_methods(c):
    t, a, b = c.pick(TYPES), *c.picks(["hits", "misses", "retries", "drops", "reads", "writes",
                                       "opens", "closes", "errors"], 2)
    s = snake(t)
    struct = f"""pub struct {t}Stats {{
    pub {a}: u32,
    pub {b}: u32,
}}

impl {t}Stats {{
    fn {a}_mut(&mut self) -> &mut u32 {{
        &mut self.{a}
    }}
    fn {b}_mut(&mut self) -> &mut u32 {{
        &mut self.{b}
    }}
}}
"""
    broken = struct + f"""
pub fn bump({s}: &mut {t}Stats) {{
    let x = {s}.{a}_mut();
    let y = {s}.{b}_mut();
    *x += 1;
    *y += 1;
}}"""
    fixed = struct.replace("    fn ", "    pub fn ") + f"""
pub fn bump({s}: &mut {t}Stats) {{
    let x = &mut {s}.{a};
    let y = &mut {s}.{b};
    *x += 1;
    *y += 1;
}}"""
    return (broken, "E0499", f"cannot borrow `*{s}` as mutable more than once at a time", fixed,
            f"Each `&mut self` method borrows the whole `{t}Stats`, so the second call conflicts "
            f"with `x`. Borrowing the two fields directly is fine: the compiler sees they are "
            f"disjoint.", 5)


def not_long_enough(c):
    f, lab = c.pick(["label_len", "name_width", "tag_size", "id_length", "code_len",
                     "caption_len"]), c.pick(LABELS)
    broken = f"""pub fn {f}() -> usize {{
    let label: &str;
    {{
        let owned = String::from("{lab}");
        label = &owned;
    }}
    label.len()
}}"""
    fixed = f"""pub fn {f}() -> usize {{
    let owned = String::from("{lab}");
    let label: &str = &owned;
    label.len()
}}"""
    return (broken, "E0597", "`owned` does not live long enough", fixed,
            "`owned` is dropped at the end of the inner block while `label` still points into "
            "it. Declare the `String` in the scope where the reference is used.", 4)


def assign_borrowed(c):
    f, v = c.pick(["reset_level", "snapshot_then_reset", "read_and_clear", "swap_out",
                   "drain_value", "take_level"]), c.pick(["level", "depth", "charge", "count",
                                                         "budget", "cursor"])
    broken = f"""pub fn {f}(mut {v}: u32) -> u32 {{
    let before = &{v};
    {v} = 0;
    *before + {v}
}}"""
    fixed = f"""pub fn {f}(mut {v}: u32) -> u32 {{
    let before = {v};
    {v} = 0;
    before + {v}
}}"""
    return (broken, "E0506", f"cannot assign to `{v}` because it is borrowed", fixed,
            f"`before` borrows `{v}` and is still used after the assignment. `u32` is `Copy`, so "
            f"keep a copy of the old value instead of a reference.", 3)


def move_out_of_index(c):
    t = c.pick(TYPES)
    s, fld = snake(t), c.pick(["items", "lines", "tags", "names", "notes", "parts"])
    head = f"pub struct {t} {{\n    pub {fld}: Vec<String>,\n}}\n\n"
    broken = head + f"pub fn first_of({s}: &{t}) -> String {{\n    let first = {s}.{fld}[0];\n    first\n}}"
    fixed = head + f"pub fn first_of({s}: &{t}) -> Option<&str> {{\n    {s}.{fld}.first().map(String::as_str)\n}}"
    return (broken, "E0507", f"cannot move out of index of `Vec<String>`", fixed,
            f"Indexing gives a place inside the vector; binding it by value would move the "
            f"`String` out of a `&{t}`. Return a borrowed `&str` instead — and `first()` also "
            f"handles an empty `{fld}` without panicking.", 4)


def missing_lifetime(c):
    f = c.pick(["longer", "pick_longest", "wider", "max_by_len", "longest_of", "bigger_str"])
    body = " {\n    if a.len() >= b.len() {\n        a\n    } else {\n        b\n    }\n}"
    return (f"pub fn {f}(a: &str, b: &str) -> &str" + body, "E0106", "missing lifetime specifier",
            f"pub fn {f}<'a>(a: &'a str, b: &'a str) -> &'a str" + body,
            "With two reference inputs, elision cannot tell which one the output borrows from. "
            "Name one lifetime for both inputs and the result: the result lives as long as the "
            "shorter of the two.", 4)


def closure_outlives(c):
    f, v = c.pick(["spawn_sum", "sum_in_thread", "background_total", "parallel_sum", "off_thread",
                   "worker_sum"]), c.pick(ITEMS)
    body = lambda mv: f"""use std::thread;

pub fn {f}({v}: Vec<u64>) -> u64 {{
    let handle = thread::spawn({mv}|| {v}.iter().sum::<u64>());
    handle.join().unwrap()
}}"""
    return (body(""), "E0373",
            f"closure may outlive the current function, but it borrows `{v}`, which is owned by "
            f"the current function", body("move "),
            f"`thread::spawn` needs a `'static` closure: the thread may outlive `{f}`. `move` "
            f"transfers ownership of `{v}` into the thread.", 5)


def iter_invalidation(c):
    f, v = c.pick(["extend_doubles", "append_doubled", "grow_with_doubles", "double_small",
                   "add_doubles", "mirror_small"]), c.pick(ITEMS)
    lim = c.randint(5, 50)
    broken = f"""pub fn {f}({v}: &mut Vec<i64>) {{
    for x in {v}.iter() {{
        if *x < {lim} {{
            {v}.push(x * 2);
        }}
    }}
}}"""
    fixed = f"""pub fn {f}({v}: &mut Vec<i64>) {{
    let extra: Vec<i64> = {v}.iter().filter(|x| **x < {lim}).map(|x| x * 2).collect();
    {v}.extend(extra);
}}"""
    return (broken, "E0502",
            f"cannot borrow `*{v}` as mutable because it is also borrowed as immutable", fixed,
            f"The loop holds an iterator over `{v}` while `push` wants to mutate it. Collect "
            f"the new values first, then `extend` once the iteration is over.", 6)


def temporary_dropped(c):
    f = c.pick(["split_pair", "key_and_value", "parts_of", "halves", "two_fields", "split_tag"])
    a, b = c.pick(LABELS), c.randint(1, 999)
    broken = f"""pub fn {f}(id: u32) -> usize {{
    let parts: Vec<&str> = format!("{a}:{{}}", id).split(':').collect();
    parts.len() + {b}
}}"""
    fixed = f"""pub fn {f}(id: u32) -> usize {{
    let joined = format!("{a}:{{}}", id);
    let parts: Vec<&str> = joined.split(':').collect();
    parts.len() + {b}
}}"""
    return (broken, "E0716", "temporary value dropped while borrowed", fixed,
            "The `String` from `format!` is a temporary freed at the end of the statement, but "
            "`parts` borrows from it. Bind it to a variable so it lives as long as `parts`.", 5)


def warm_clone(c):
    v, lab = c.pick(["name", "title", "label", "host", "owner", "path"]), c.pick(LABELS)
    broken = f"""pub fn greet() -> (String, String) {{
    let {v} = String::from("{lab}");
    let copy = {v};
    ({v}, copy)
}}"""
    fixed = broken.replace(f"let copy = {v};", f"let copy = {v}.clone();")
    return (broken, "E0382", f"use of moved value: `{v}`", fixed,
            f"`let copy = {v};` moves the `String`; `String` is not `Copy`. `.clone()` makes a "
            f"second owned string.", 1)


def warm_mut(c):
    v = c.pick(["total", "sum", "acc", "running", "count", "score"])
    n = c.randint(3, 20)
    broken = f"""pub fn add_up() -> u32 {{
    let {v} = 0;
    for i in 1..={n} {{
        {v} += i;
    }}
    {v}
}}"""
    return (broken, "E0384", f"cannot assign twice to immutable variable `{v}`",
            broken.replace(f"let {v} = 0;", f"let mut {v} = 0;"),
            f"Bindings are immutable unless declared `mut`; `+=` assigns to `{v}`.", 2)


CASES = [(moved_vec, 3), (push_while_borrowed, 3), (two_mut_methods, 2), (not_long_enough, 2),
         (assign_borrowed, 2), (move_out_of_index, 2), (missing_lifetime, 2),
         (closure_outlives, 2), (iter_invalidation, 2), (temporary_dropped, 2), (warm_clone, 2),
         (warm_mut, 2)]
