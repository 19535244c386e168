"""vox_lang helpers shared by the drills, repairs and programs: prompts, the diagnostic of a
program (what mens.synth.vox or voxrun reports, or None), and random valid multi-part programs."""
from __future__ import annotations

from mens.synth.vox import VoxError, vox_check

from .common import fence, jdump, msg
from .vox_programs import FAMILIES
from .voxrun import VoxRuntimeError, run

SYSTEM = [
    "You are a Vox expert. Vox is a small scripting language: `let` bindings end with `;`, "
    "blocks use braces, `fn` definitions live at top level and see only their parameters, "
    "locals and other functions. Answer with working Vox in ```vox blocks.",
    "You help people write and repair Vox programs. Vox has let-bindings, top-level "
    "functions, if/else, while and for-in loops, integers, strings and lists, and the builtins "
    "print, len, push, pop, str, range, join and abs. Put code in ```vox fences.",
    "Assistant for the Vox scripting language. Be precise about Vox syntax (semicolons, "
    "braces, `else if`), keep answers short, and show complete programs in ```vox blocks.",
]
TOOLS = '<tools>\n' + jdump({"name": "vox_run", "description": "Run a Vox program; returns its "
                             "output or the first diagnostic.", "parameters": {
                                 "type": "object", "properties": {"source": {"type": "string"}},
                                 "required": ["source"]}}) + '\n</tools>'


def sys_msg(c, tools: bool = False):
    return msg("system", c.choice(SYSTEM) + ("\n\n" + TOOLS if tools else ""))


def out_block(lines) -> str:
    return fence("text", "\n".join(lines))


def diag(src: str) -> str | None:
    try:
        vox_check(src)
    except VoxError as e:
        return str(e)
    try:
        run(src, limit=20_000)     # the templates' programs need < 5k steps; a mutation that
    except VoxRuntimeError as e:   # loops forever is cut short here (and then not used)
        return f"runtime error: {e}"
    return None


def program(c, n: int = 1):
    """A valid program of n families (distinct names), or None if names collide."""
    fams = c.rng.sample(FAMILIES, n)
    parts = [f(c) for f in fams]
    src = "\n".join(p["src"] for p in parts)
    return (parts, src) if diag(src) is None else None
