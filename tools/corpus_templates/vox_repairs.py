"""vox_lang diagnostic repairs (d3-8): a valid program is broken by one mutation (a dropped
`;`, an unclosed string or block, a misspelt or undeclared name, ...); the user quotes what
mens.synth.vox really reports and the answer explains that error and gives the fixed program with its
real output. A mutation is used only if the reference reports the error its explanation
describes (EXPECT)."""
from __future__ import annotations

import re

from .common import fence, join, msg, record
from .vox_core import diag, out_block, program, sys_msg
from .voxrun import run

def _lines_where(src, pred):
    return [i for i, line in enumerate(src.split("\n")) if pred(line)]


def mutate(c, src: str, kinds=None):
    """(broken source, line number, kind) for one random applicable mutation, or None."""
    lines = src.split("\n")
    options = {
        "semicolon": _lines_where(src, lambda l: l.endswith(";")),
        "string": _lines_where(src, lambda l: l.count('"') >= 2),
        "brace": _lines_where(src, lambda l: l.strip() == "}" and l.startswith(" ")),
        "undeclared": _lines_where(src, lambda l: re.match(r"\s*let \w+ = ", l)),
        "redeclare": _lines_where(src, lambda l: re.match(r"\s*\w+ = ", l)),
        "condition": _lines_where(src, lambda l: re.search(r"\bif .* == ", l)),
        "typo": _lines_where(src, lambda l: not l.lstrip().startswith(("let", "fn", "}"))),
        "tostring": _lines_where(src, lambda l: '" + str(' in l),
    }
    kinds = [k for k in (kinds or options) if options[k]]
    if not kinds:
        return None
    kind = c.choice(kinds)
    i = c.choice(options[kind])
    line = lines[i]
    if kind == "semicolon":
        lines[i] = line[:-1]
    elif kind == "string":
        j = line.rindex('"')
        lines[i] = line[:j] + line[j + 1:]
    elif kind == "brace":
        del lines[i]
    elif kind == "undeclared":
        lines[i] = line.replace("let ", "", 1)
    elif kind == "redeclare":
        lines[i] = re.sub(r"^(\s*)", r"\1let ", line, count=1)
    elif kind == "condition":
        lines[i] = line.replace(" == ", " = ", 1)
    elif kind == "typo":
        names = [n for n in re.findall(r"\b[a-z_]{3,}\b", line.split('"')[0])
                 if n not in ("str", "len", "push", "print", "join", "range", "and", "not",
                              "while", "for", "return", "true", "false")]
        if not names:
            return None
        n = c.choice(names)
        lines[i] = re.sub(rf"\b{n}\b", n[:-1] if c.chance(0.5) else n + n[-1], line, count=1)
    else:
        j = line.index('" + str(') + 4
        k, depth = j + 4, 1
        while depth:
            depth += {"(": 1, ")": -1}.get(line[k], 0)
            k += 1
        lines[i] = line[:j] + line[j + 4:k - 1] + line[k:]
    return "\n".join(lines), i + 1, kind


EXPECT = {"semicolon": "error[V003]", "brace": "error[V003]", "condition": "error[V003]",
          "string": "error[V002]", "typo": "error[V004]", "undeclared": "error[V007]",
          "redeclare": "error[V008]", "tostring": "runtime error: cannot add"}
WHY = {
    "semicolon": ["Line {L} ends a statement without its `;`, so the parser only notices at the "
                  "next token.", "The statement on line {L} is missing the closing semicolon; Vox "
                  "reports it where the next statement starts.", "A `;` is missing at the end of "
                  "line {L} — the error position is the token right after the gap."],
    "string": ["The string literal on line {L} never closes: add the final `\"`.", "Line {L} "
               "opens a string and the line ends before its closing quote.", "Unbalanced quotes "
               "on line {L}: Vox strings cannot span lines, so close it there."],
    "brace": ["A block is never closed: the `}}` that stood at line {L} is missing, so the "
              "parser runs on until something cannot be inside that block.", "One closing "
              "brace is gone (it stood at line {L}); every `{{` needs its `}}`.", "The braces do "
              "not balance — restore the `}}` that ended the block at line {L}."],
    "undeclared": ["Line {L} assigns to a name that was never declared. The first binding needs "
                   "`let`.", "Assignment without a prior `let`: Vox only lets you update names "
                   "that exist, so line {L} must declare it.", "Line {L} is the first time the "
                   "name appears, so it must be `let`, not a bare assignment."],
    "redeclare": ["Line {L} re-declares a name with `let` in the same scope; to update it, "
                  "assign without `let`.", "`let` on line {L} would declare the name a second "
                  "time in one scope — drop the `let` to assign.", "The name on line {L} already "
                  "exists in this scope, so this is an update, not a new `let`."],
    "condition": ["Line {L} uses `=` (assignment) where a comparison is meant: conditions need "
                  "`==`.", "In a condition `=` is not allowed; line {L} wants `==`.", "The `if` "
                  "on line {L} compares, so it takes `==` — a single `=` ends the condition early."],
    "typo": ["Line {L} misspells a name, so the resolver cannot find it; use the declared "
             "spelling.", "The name on line {L} does not match any binding in scope — it is a "
             "typo of the declared one.", "Undefined name on line {L}: a one-letter slip from "
             "the name declared earlier."],
    "tostring": ["Line {L} adds an integer to a string; Vox will not convert implicitly, so wrap "
                 "the number in `str(...)`.", "At runtime `+` got a string and an integer on line "
                 "{L}: put the number through `str()`.", "Mixed types on line {L}: `\"...\" + "
                 "number` needs `str(number)`."],
}


def repair_turn(c, src, kinds=None):
    m = mutate(c, src, kinds)
    if not m:
        return None
    broken, line, kind = m
    err = diag(broken)
    if err is None or not err.startswith(EXPECT[kind]):   # the explanation must fit the error
        return None
    tool = "vox run" if err.startswith("runtime") else "vox check"
    ask = c.pick([f"`{tool}` says:\n{fence('text', err)}\n{fence('vox', broken)}",
                  f"Getting this from {tool}:\n{fence('text', err)}\nCode:\n{fence('vox', broken)}",
                  f"{fence('vox', broken)}\n{tool} → {err}\nWhat's wrong?"])
    fixed = src.split("\n")[line - 1] if kind != "brace" else "}"
    why = c.prose(c.pick(WHY[kind]).format(L=line), f"The fix on line {line}: `{fixed.strip()}`.")
    ans = join(why, fence("vox", src), c.prose(c.pick(["It now prints:", "Output after the "
                                                       "fix:", "Running the fixed version:"])),
               out_block(run(src)))
    return ask, ans, kind


def repair_single(c):
    for _ in range(20):
        got = program(c)
        turn = got and repair_turn(c, got[1])
        if turn:
            d = {"semicolon": 3, "string": 3, "condition": 4, "undeclared": 4, "brace": 5,
                 "typo": 4, "redeclare": 5, "tostring": 5}[turn[2]] + (got[0][0]["d"] >= 6)
            return record([sys_msg(c), msg("user", turn[0]), msg("assistant", turn[1])], d,
                          "syntax" if d <= 4 else "reasoning", f"repair_{turn[2]}")
    raise RuntimeError("vox repair: no applicable mutation in 20 programs")


def repair_followup(c):
    for _ in range(30):
        one, two = program(c), program(c, 2)
        if not (one and two):
            continue
        t1 = repair_turn(c, one[1], ["semicolon", "string", "condition", "brace"])
        t2 = repair_turn(c, two[1], ["typo", "undeclared", "redeclare", "tostring"])
        if t1 and t2:
            more = c.pick(["Thanks. I extended it and now there's another problem:",
                           "That worked. Next version fails differently:",
                           "OK, fixed. After adding a second part I get:"])
            return record([sys_msg(c), msg("user", t1[0]), msg("assistant", t1[1]),
                           msg("user", f"{more}\n\n{t2[0]}"), msg("assistant", t2[1])],
                          c.choice([7, 8]), "multi_turn", "repair_followup")
    raise RuntimeError("vox followup: no valid program pair in 30 tries")
