"""speech_to_code: transcribed, disfluent requests (fillers, repeats, false starts,
self-corrections) → Python. Each example result quoted in an answer is obtained by running the
code; a self-correction in the request ("call it x, no wait, y") is honoured in the code."""
from __future__ import annotations

import re

from .common import fence, join, jdump, msg, record
from .speech_funcs import FAMILIES

SYSTEM = [
    "You turn dictated requests into Python. The transcript is raw speech: ignore fillers and "
    "false starts, and when the speaker corrects themselves, the correction wins. Reply with a "
    "one-line restatement and the code in a ```python block.",
    "You are a voice coding assistant. Input is an unedited speech transcript; extract the "
    "intent, honour self-corrections, and answer with short, idiomatic Python.",
    "Speech-to-code assistant: write the Python function the speaker means. Keep it small and "
    "runnable; put code in ```python fences.",
]
FILLERS = ["um", "uh", "like", "you know", "so", "okay so", "er", "hmm", "right", "basically",
           "I mean", "let's see"]
TOOLS = "<tools>\n" + jdump({"name": "run_python", "description": "Execute Python code and "
                             "return stdout, or the exception.", "parameters": {
                                 "type": "object", "properties": {"code": {"type": "string"}},
                                 "required": ["code"]}}) + "\n</tools>"


def disfluent(c, chunks: list[str], level: int) -> str:
    """Speech from clean phrases: level 0 light (a filler), 1 fillers + repeats, 2 + a false
    start. Self-corrections are added by the caller, where the code depends on them."""
    out = [c.pick(["so", "okay", "hey", "alright", "right so", "can you", "I need", "could you"])]
    for i, ch in enumerate(chunks):
        if c.chance(0.35 + 0.2 * level):
            out.append(c.choice(FILLERS) + ",")
        if level and c.chance(0.25):
            first = ch.split()[0]
            out.append(f"{first} {first}" + ch[len(first):])
            continue
        out.append(ch)
    if level >= 2:
        k = c.randint(1, len(out) - 1)
        out.insert(k, c.pick(["make it— no,", "wait, sorry,", "let me start over,",
                              "actually hold on,", "no, scratch that,", "where was I,"]))
    if c.chance(0.4):
        out.append(c.pick(["thanks", "yeah that's it", "cool", "I think that's all",
                           "perfect thanks", "that should do it"]))
    return " ".join(out)


def run_call(code: str, call: str):
    ns: dict = {}
    exec(code, ns)                     # the generator's own templates, not user input
    return eval(call, ns)


def example(c, fam, code):
    call = f"{fam['name']}({fam['example']})"
    return call, repr(run_call(code, call))


def with_name_fix(c, fam, chunks):
    """Speaker first says a wrong name, then corrects it: the code must use the second."""
    wrong = c.pick(["helper", "do_it", "thing", "process", "calc", "func", "handler", "foo", "util"])
    i = next(k for k, ch in enumerate(chunks) if fam["name"] in ch)
    chunks = list(chunks)
    chunks[i] = c.pick([f"called {wrong}, no wait, call it {fam['name']}",
                        f"named {wrong}— actually no, {fam['name']}",
                        f"{wrong}, sorry, I mean {fam['name']}"])
    return chunks


def answer(c, fam, code, call=None):
    call, result = example(c, fam, code) if call is None else call
    lead = c.pick([f"So: `{fam['name']}` {fam['summary']}.", f"You want `{fam['name']}`, which "
                   f"{fam['summary']}.", f"Got it — `{fam['name']}` {fam['summary']}."])
    return join(c.prose(lead), fence("python", code), c.prose(f"`{call}` returns `{result}`."))


def dictation(c):
    fam = c.pick(FAMILIES)(c)
    level, fix = c.choice([0, 1, 2]), c.chance(0.4)
    chunks = with_name_fix(c, fam, fam["say"]) if fix else fam["say"]
    d = min(6, fam["d"] + level // 2 + fix)
    phase = "warmup" if d <= 2 else "syntax" if d <= 4 else "reasoning"
    return record([msg("system", c.choice(SYSTEM)), msg("user", disfluent(c, chunks, level)),
                   msg("assistant", answer(c, fam, fam["code"]))], d, phase,
                  "dictation" + ("_selfcorrect" if fix else ""))


def dictation_module(c):
    fams = [f(c) for f in c.rng.sample(c.part(FAMILIES), c.choice([2, 3]))]
    if len({f["name"] for f in fams}) < len(fams) or any("import" in f["code"] for f in fams):
        return dictation_module(c)
    said = [disfluent(c, f["say"], 1) for f in fams]
    glue = c.pick(["and then also", "oh and another one,", "next,", "and, um, one more,",
                   "plus", "after that"])
    main = c.pick(["demo", "main", "try_them", "show_examples", "smoke_test", "run_examples"])
    speech = f" {glue} ".join(said) + " " + c.pick(
        [f"and a {main} function that prints each one on an example",
         f"oh and a {main} that, uh, calls them all once and prints the results",
         f"then {main}, which just runs each on some sample input"])
    calls = [f"{f['name']}({f['example']})" for f in fams]
    code = "\n\n\n".join(f["code"] for f in fams) + f"\n\n\ndef {main}():\n" + "".join(
        f"    print({call})\n" for call in calls)
    printed = [str(run_call(f["code"], call)) for f, call in zip(fams, calls)]   # as print shows it
    ans = join(c.prose(c.pick([f"{len(fams)} functions plus `{main}`:", f"Here are the "
                               f"{len(fams)} helpers and `{main}`:", f"All {len(fams)} pieces "
                               f"and the `{main}` driver:"])),
               fence("python", code), c.prose(f"`{main}()` prints:"),
               c.prose(fence("text", "\n".join(printed))))
    return record([msg("system", c.choice(SYSTEM)), msg("user", speech), msg("assistant", ans)],
                  7 + len(fams) - 1, "orchestration", "dictation_module")


def dictation_agentic(c):
    """Write, run on the example and on the edge case the speaker asked about, see it fail,
    guard it, re-run: both runs' output come from really executing the code."""
    fam = c.choice([f for f in (g(c) for g in c.part(FAMILIES)) if f["guard"]])
    name, (cond, action, edge, phrase) = fam["name"], fam["guard"]
    guarded = insert_guard(fam["code"], fam["guard"])
    try:
        run_call(fam["code"], f"{name}({edge})")
        raise RuntimeError(f"speech template {name}: edge case {edge} does not fail unguarded")
    except (TypeError, AttributeError, IndexError, ValueError, ZeroDivisionError) as e:
        failure = f"{type(e).__name__}: {e}"
    first = str(run_call(fam["code"], f"{name}({fam['example']})"))
    second = str(run_call(guarded, f"{name}({edge})"))
    probe = f"print({name}({fam['example']}))\nprint({name}({edge}))"
    call = lambda code: ("<tool_call>\n" + jdump({"name": "run_python", "arguments": {
        "code": code + "\n\n" + probe}}) + "\n</tool_call>")
    msgs = [msg("system", c.choice(SYSTEM) + "\n\n" + TOOLS),
            msg("user", disfluent(c, fam["say"] + [f"and, um, {phrase}"], 2)),
            msg("assistant", c.pick(["Writing it, then trying the example and the edge case.",
                                     "Draft first; I'll run both cases.", "Let me check the "
                                     "edge case by running it."]) + "\n" + call(fam["code"])),
            msg("tool", jdump({"stdout": first + "\n", "error": failure})),
            msg("assistant", c.pick([f"The edge case fails ({failure}); adding a guard.",
                                     f"`{name}({edge})` raises {failure.split(':')[0]}, so I "
                                     f"guard it first.", f"As feared: {failure}. Guarding it."])
                + "\n" + call(guarded)),
            msg("tool", jdump({"stdout": f"{first}\n{second}\n", "error": None})),
            msg("assistant", join(f"Both cases pass. `{name}` {fam['summary']}; "
                                  f"`{name}({edge})` gives `{second}`.",
                                  fence("python", guarded)))]
    return record(msgs, 10, "agentic", "dictation_agentic")


def insert_guard(code: str, guard) -> str:
    lines = code.split("\n")
    i = next(k for k, line in enumerate(lines) if line.startswith("def "))
    return "\n".join(lines[:i + 1] + [f"    {guard[0]}", f"        {guard[1]}"] + lines[i + 1:])


def edit(c, fam, code):
    """One spoken change request and the code after it, or None if it does not apply."""
    kinds = ["rename", "docstring"] + ["typed"] * bool(fam["typed"]) + \
        ["guard"] * bool(fam["guard"])
    kind = c.choice(kinds)
    if kind == "rename":
        new = c.pick(["compute", "get_result", "calculate", "evaluate", "work_out", "derive",
                      "produce", "figure_out", "resolve"]) + "_" + fam["name"].split("_")[-1]
        ask = c.pick([f"uh, actually rename it to {new}, the name's a bit, um, vague",
                      f"can you call it {new} instead", f"hmm, {new} would be a better name"])
        out = re.sub(rf"\b{fam['name']}\b", new, code)
        fam["name"] = new
    elif kind == "docstring":
        ask = c.pick(["and, uh, put a docstring on it", "oh, add a docstring please",
                      "can it have a, like, one-line docstring"])
        lines = code.split("\n")
        i = next(k for k, line in enumerate(lines) if line.startswith("def "))
        doc = fam["summary"].replace("`", "")
        out = "\n".join(lines[:i + 1] + [f'    """{doc[0].upper() + doc[1:]}."""'] + lines[i + 1:])
    elif kind == "typed":
        ask = c.pick(["oh and add, um, type hints", "type hints too please", "can you add the, "
                      "uh, the type annotations"])
        typed_def = next(l for l in fam["typed"].split("\n") if l.startswith("def "))
        out = "\n".join(typed_def if l.startswith("def ") else l for l in code.split("\n"))
    else:
        ask = c.pick(["wait, what if it's empty, um, handle that", "uh, it should cope with an "
                      "empty input", "hmm, guard the empty case"])
        out = insert_guard(code, fam["guard"])
    return ask, out


def correction(c):
    fam = c.pick(FAMILIES)(c)
    loop = fam["loop"] and c.chance(0.5)
    code = fam["loop"][0] if loop else fam["code"]
    msgs = [msg("system", c.choice(SYSTEM)), msg("user", disfluent(c, fam["say"], 1)),
            msg("assistant", answer(c, fam, code))]
    if loop:
        ask = c.pick(["hmm, make that a, uh, a comprehension", "can you make it shorter, like a "
                      "one-liner", "uh, no loop please, use a comprehension or something"])
        msgs += [msg("user", ask), msg("assistant", join(c.prose(c.pick([
            "Same behaviour, without the explicit loop:", "Shorter version:",
            "As a comprehension:"])), fence("python", fam["loop"][1])))]
        code = fam["loop"][1]
    rounds = c.choice([1, 2]) if not loop else c.choice([0, 1])
    for _ in range(rounds):
        ask, code = edit(c, fam, code)
        msgs += [msg("user", ask), msg("assistant", join(c.prose(c.pick(
            ["Done:", "Updated:", "Here you go:", "Changed:", "Sure:", "Revised:"])),
            fence("python", code)))]
    turns = (len(msgs) - 1) // 2
    return record(msgs, min(9, 4 + turns * 1 + (fam["d"] >= 4)), "multi_turn",
                  "correction" + ("_comprehension" if loop else ""))


SOURCES = {
    "dictations": [(6, dictation), (2.5, dictation_module), (1.5, dictation_agentic)],
    "corrections": [(1, correction)],
}
