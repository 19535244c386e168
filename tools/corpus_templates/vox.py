"""vox_lang: drills, diagnostic → fix repairs and programs in Vox (grammar: mens/vox.py).

Every diagnostic quoted is what mens.synth.vox really reports for the broken program, and every
output is what voxrun really prints — the generator asserts both, so a template cannot claim
an error or a result that the reference implementation disagrees with."""
from __future__ import annotations

from .common import fence, join, jdump, msg, record
from .vox_core import diag, out_block, program, sys_msg
from .vox_programs import FAMILIES, LISTS, WORDS, lit, nums
from .vox_repairs import repair_followup, repair_single
from .voxrun import run


# ------------------------------------------------------------------ grammar drills (d1-4)
def drill_bind(c):
    name, data = c.pick(LISTS), nums(c, k=(3, 7))
    code = f"let {name} = {lit(data)};\nprint(len({name}));"
    user = c.pick([f"How do I bind `{name}` to the list {lit(data)} in Vox and print how many "
                   f"there are?", f"Vox question: make a list called {name} holding {lit(data)} "
                   f"and print its length.", f"Show me the Vox for storing {lit(data)} as "
                   f"`{name}` and printing the count."])
    why = c.pick(["`let` introduces a name and every statement ends with `;`; `len` counts the "
                  "items of a list (or the characters of a string).",
                  "A binding is `let name = value;`, semicolon required, and the `len` builtin "
                  "gives the number of items.",
                  "Declare with `let` (later updates drop the `let`), close each statement with a "
                  "semicolon, and hand the list to `len`."])
    ans = join(c.prose(why), fence("vox", code), c.prose(f"Output: `{run(code)[0]}`."))
    return record([sys_msg(c), msg("user", user), msg("assistant", ans)], 1, "warmup", "drill_bind")


def drill_string(c):
    label, a, b = c.pick(WORDS), c.randint(2, 900), c.randint(2, 900)
    code = f'let label = "{label}";\nlet a = {a};\nlet b = {b};\nprint(label + ": " + str(a + b));'
    user = c.pick([f"In Vox, print `{label}: ` followed by the sum of {a} and {b}.",
                   f"Vox: how do I print the text {label} and then {a} + {b}?",
                   f"Print \"{label}: <sum of {a} and {b}>\" in Vox."])
    why = c.pick(["`+` joins two strings or adds two integers, never one of each, so the sum "
                  "goes through `str(...)` first.", "Vox does not convert numbers to text "
                  "implicitly: wrap the sum in `str()` before concatenating it.",
                  "Mixing a string and an integer with `+` is a runtime error in Vox; `str(a + b)` "
                  "turns the sum into text."])
    ans = join(c.prose(why), fence("vox", code), c.prose(f"It prints `{run(code)[0]}`."))
    return record([sys_msg(c), msg("user", user), msg("assistant", ans)], 2, "warmup",
                  "drill_string")


def predict_program(c):
    kind = c.choice(["prec", "cond", "loop", "list"])
    x, y = c.pick([("a", "b"), ("p", "q"), ("left", "right"), ("m", "k"), ("base", "step"),
                   ("u", "v"), ("lo", "hi"), ("first", "second"), ("i0", "i1")])
    if kind == "prec":
        a, b, k, w, v = (c.randint(1, 20) for _ in range(5))
        return 2, f"let {x} = {a};\nlet {y} = {b};\nprint(str({x} + {y} * {k} - {w * v + 1} / {v}));", \
            c.pick(["`*` and `/` bind tighter than `+` and `-`, and `/` on integers truncates "
                    "toward zero", "multiplication and division happen first; integer `/` "
                    "drops the remainder", "precedence puts `*` and `/` before `+` and `-`, and "
                    "dividing integers rounds toward zero"])
    if kind == "cond":
        t, hi, lo = c.randint(-5, 40), c.randint(25, 32), c.randint(8, 15)
        n = c.pick(["t", "temp", "reading", "deg", "celsius", "level"])
        w = c.picks(["hot", "mild", "cold", "warm", "cool", "icy", "balmy", "crisp", "frigid"], 3)
        return 3, (f'let {n} = {t};\nif {n} > {hi} {{\n  print("{w[0]}");\n}} else if {n} > {lo} {{\n'
                   f'  print("{w[1]}");\n}} else {{\n  print("{w[2]}");\n}}'), \
            c.pick(["the branches are tried top to bottom and only the first true one runs",
                    "an `else if` chain stops at the first condition that holds",
                    "conditions are checked in order; later branches are skipped once one "
                    "matches"])
    if kind == "loop":
        n, d = c.randint(10, 60), c.randint(3, 9)
        return 4, (f"let {x} = {n};\nlet {y} = 0;\nwhile {x} > 0 {{\n  {x} = {x} - {d};\n  {y} = {y}"
                   f" + 1;\n}}\nprint(str({y}) + \" \" + str({x}));"), \
            c.pick([f"the loop subtracts {d} until {x} is no longer positive, so it may end "
                    f"below zero", f"each pass takes {d} off {x} and counts one in {y}; it stops "
                    f"once {x} <= 0", f"{y} counts the passes; {x} overshoots past zero when "
                    f"{d} does not divide it"])
    xs, v, i = nums(c, 1, 50, (3, 5)), c.randint(1, 50), c.randint(0, 3)
    return 3, (f"let {x} = {lit(xs)};\npush({x}, {v});\nprint(str({x}[{i}]) + \" of \" + "
               f"str(len({x})));"), c.pick(["lists are zero-indexed and `push` appends in place",
                                           "`push` mutates the list; indexing starts at 0",
                                           "index 0 is the first item, and `push` adds at the end"])


def drill_predict(c):
    d, code, rule = predict_program(c)
    out = run(code)
    user = c.pick(["What does this Vox program print?", "Predict the output:", "Without "
                   "running it, what is printed?", "What's the output of this Vox snippet?",
                   "Trace this Vox code and tell me what it prints.", "Output of the following?"])
    annotated = code + f"  # prints {out[-1]}"
    ans = join(f"It prints:\n{out_block(out)}", c.prose(f"Why: {rule}."),
               c.prose(c.pick(["The same program with the result noted:", "Annotated:",
                               "For reference, annotated:"])), fence("vox", annotated))
    return record([sys_msg(c), msg("user", f"{user}\n\n{fence('vox', code)}"),
                   msg("assistant", ans)], d, "warmup" if d <= 2 else "syntax", "drill_predict")


def drill_translate(c):
    f = c.pick(["sum_even", "even_total", "add_evens", "evens_sum", "total_even", "sum_pairs"])
    p, acc, v, m = c.pick(["xs", "values", "nums"]), c.pick(["total", "acc", "s"]), \
        c.pick(["x", "v", "n"]), c.randint(2, 5)
    py = (f"def {f}({p}):\n    {acc} = 0\n    for {v} in {p}:\n        if {v} % {m} == 0:\n"
          f"            {acc} += {v}\n    return {acc}")
    vx = (f"fn {f}({p}) {{\n  let {acc} = 0;\n  for {v} in {p} {{\n    if {v} % {m} == 0 {{\n"
          f"      {acc} = {acc} + {v};\n    }}\n  }}\n  return {acc};\n}}")
    data = nums(c, 1, 40, (4, 7))
    full = vx + f"\nprint(str({f}({lit(data)})));"
    notes = c.pick(["Differences: braces instead of indentation, `;` after each statement, and "
                    "no `+=` (write the update out).", "Vox has no augmented assignment and no "
                    "significant indentation: blocks are braced and statements end in `;`.",
                    "Translate `+=` into an explicit update, indentation into `{ }` blocks, and "
                    "end statements with semicolons."])
    ans = join(c.prose(notes), fence("vox", full), c.prose(f"For {lit(data)} it prints "
                                                           f"`{run(full)[0]}`."))
    user = f"{c.pick(['Translate to Vox:', 'Port this Python function to Vox:', 'Vox version of this, please:'])}\n\n{fence('python', py)}"
    return record([sys_msg(c), msg("user", user), msg("assistant", ans)], c.choice([3, 4]),
                  "syntax", "drill_translate")


def drill_function(c):
    shape = c.choice([("area", "w * h", "the area of a w by h rectangle", ["w", "h"]),
                      ("perimeter", "2 * (w + h)", "the perimeter of a w by h rectangle", ["w", "h"]),
                      ("midpoint", "(a + b) / 2", "the integer midpoint of a and b", ["a", "b"]),
                      ("spread", "abs(a - b)", "the absolute difference of a and b", ["a", "b"]),
                      ("cube", "n * n * n", "n cubed", ["n"])])
    f = c.pick([shape[0], shape[0] + "_of", "calc_" + shape[0], "get_" + shape[0],
                shape[0] + "_fn", "my_" + shape[0]])
    args = [str(c.randint(1, 30)) for _ in shape[3]]
    code = (f"fn {f}({', '.join(shape[3])}) {{\n  return {shape[1]};\n}}\n"
            f"print(str({f}({', '.join(args)})));")
    user = c.pick([f"Write a Vox function `{f}` returning {shape[2]}, and call it with "
                   f"{', '.join(args)}.", f"I need `{f}` in Vox: it should compute {shape[2]}. "
                   f"Show a call with {', '.join(args)}.", f"Vox: define {f} for {shape[2]}; "
                   f"test it on {', '.join(args)}."])
    ans = join(fence("vox", code), c.prose(f"`{f}({', '.join(args)})` prints `{run(code)[0]}`."))
    return record([sys_msg(c), msg("user", user), msg("assistant", ans)], 3, "syntax",
                  "drill_function")


# ------------------------------------------------------------------ programs (d4-10)
def program_single(c):
    fam = c.choice(FAMILIES)(c)
    user = c.pick([f"Write a Vox program that {fam['task']}.", f"Vox please: a program that "
                   f"{fam['task']}.", f"Can you write Vox code that {fam['task']}?"])
    ans = join(fence("vox", fam["src"]), c.prose(c.pick(["Output:", "Running it prints:",
                                                         "When run it prints:"])),
               out_block(run(fam["src"])))
    d = fam["d"]
    return record([sys_msg(c), msg("user", user), msg("assistant", ans)], d,
                  "syntax" if d <= 4 else "reasoning", "program_single")


def program_combo(c):
    for _ in range(20):
        got = program(c, c.choice([2, 2, 3, 3, 3, 5]))   # now and then a long script
        if got:
            parts, src = got
            tasks = "; then ".join(p["task"] for p in parts)
            user = c.pick([f"One Vox script, please: it {tasks}.", f"I need a Vox program that "
                           f"{tasks}.", f"Write Vox that {tasks} — keep each part a function "
                           f"where it makes sense."])
            ans = join(c.prose(c.pick(["Each part is independent, so each gets its own function "
                                       "and its own print.", "The parts share nothing, so they "
                                       "are separate functions called in order.", "Separate "
                                       "top-level functions keep the parts testable."])),
                       fence("vox", src), c.prose("Output:"), out_block(run(src)))
            return record([sys_msg(c), msg("user", user), msg("assistant", ans)],
                          min(9, 7 + len(parts) - 1), "orchestration", "program_combo")
    raise RuntimeError("vox combo: names collided 20 times")


def _buggy(c, fam):
    for good, bad in fam["bugs"]:
        wrong = fam["src"].replace(good, bad, 1)
        if wrong != fam["src"] and diag(wrong) in (None,) and run(wrong) != run(fam["src"]):
            return good, bad, wrong
    return None


def program_debug(c, agentic: bool = False):
    for _ in range(40):
        fam = c.choice(FAMILIES)(c)
        bug = _buggy(c, fam)
        if bug:
            break
    else:
        raise RuntimeError("vox debug: no family with an observable bug in 40 tries")
    good, bad, wrong = bug
    right_out, wrong_out = run(fam["src"]), run(wrong)
    task = c.pick([f"Write a Vox program that {fam['task']}.", f"I need Vox code that "
                   f"{fam['task']}.", f"Vox program, please, which {fam['task']}."])
    diagnosis = c.pick([f"The bug: `{bad}` should be `{good}`.", f"Found it — `{bad}` is off; "
                        f"it must read `{good}`.", f"`{bad}` is wrong here; the correct "
                        f"fragment is `{good}`."])
    if not agentic:
        report = c.pick(["I ran it and got this, which is wrong:", "Output doesn't look right:",
                         "Hmm, it prints:"])
        return record([sys_msg(c), msg("user", task), msg("assistant", fence("vox", wrong)),
                       msg("user", f"{report}\n{out_block(wrong_out)}\nBy hand I expect:\n"
                                   f"{out_block(right_out)}"),
                       msg("assistant", join(diagnosis, fence("vox", fam["src"]),
                                             c.pick(["Now it prints:", "Corrected output:",
                                                     "With the fix:"]), out_block(right_out)))],
                      8, "multi_turn", "program_debug")
    call = lambda s: f"<tool_call>\n{jdump({'name': 'vox_run', 'arguments': {'source': s}})}\n</tool_call>"
    check = c.pick(["Let me run it before answering.", "Running it to check.",
                    "I'll run this first."])
    mismatch = c.pick([f"That is not right: checking by hand gives {right_out[-1]!r}, the run "
                       f"printed {wrong_out[-1]!r}.", f"The last line should be "
                       f"{right_out[-1]!r} but the program printed {wrong_out[-1]!r}.",
                       f"Mismatch: expected {right_out[-1]!r}, got {wrong_out[-1]!r}."])
    msgs = [sys_msg(c, tools=True), msg("user", task),
            msg("assistant", f"{check}\n{call(wrong)}"),
            msg("tool", jdump({"stdout": "\n".join(wrong_out), "exit": 0})),
            msg("assistant", f"{mismatch} {diagnosis}\n{call(fam['src'])}"),
            msg("tool", jdump({"stdout": "\n".join(right_out), "exit": 0})),
            msg("assistant", join(c.pick(["Verified. The program:", "Checked by running it:",
                                          "Final version (run and verified):"]),
                                  fence("vox", fam["src"]), "Output:", out_block(right_out)))]
    return record(msgs, 9 + (fam["d"] >= 6), "agentic", "program_agentic")


SOURCES = {
    "grammar_drills": [(2, drill_bind), (2, drill_string), (3, drill_predict),
                       (2, drill_translate), (2, drill_function)],
    "diagnostic_repairs": [(6, repair_single), (4, repair_followup)],
    "programs": [(2, program_single), (3, program_combo), (2, program_debug),
                 (3, lambda c: program_debug(c, agentic=True))],
}
