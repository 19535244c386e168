"""The comments written beside a class's fields, read from its source with `tokenize`.

mens documents a config key, a telemetry field or an event where it is declared — a trailing
`# comment`, a comment block on the lines above it, or a trailing comment continued on the next
line (`#` then the text aligned under the comment above). Docstrings hold the class's story; the
fields' comments are what the reference pages show beside each name. Reading them with tokenize
(not a regex over the text) keeps a `#` inside a string a string.

    field_comments(cls) -> {"name": "the comment text", ...}   # fields in declaration order
"""
from __future__ import annotations

import ast
import inspect
import io
import sys
import textwrap
import tokenize
from dataclasses import dataclass, field

# tokens that neither start nor end a field's statement
_LAYOUT = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT,
           tokenize.ENCODING, tokenize.ENDMARKER)


@dataclass
class _Field:
    name: str
    first: int                      # its first and last physical line
    last: int = 0                   # its last line, or the last line its comment went on to
    before: list[str] = field(default_factory=list)
    trailing: list[str] = field(default_factory=list)


def field_comments(cls: type) -> dict[str, str]:
    """{field name: its comment} for every field (annotated name, or `NAME = value` for an Enum)
    declared in the body of `cls` itself; a field with no comment maps to ""."""
    source = textwrap.dedent(inspect.getsource(cls))
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    fields_: list[_Field] = []
    pending: list[str] = []       # own-line comments since the last field or blank line
    depth, line_start, current = 0, True, None
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.INDENT:
            depth += 1
        elif tok.type == tokenize.DEDENT:
            depth -= 1
        elif tok.type == tokenize.COMMENT:
            text = tok.string[1:]
            own_line = tok.line[:tok.start[1]].strip() == ""
            if not own_line and current is not None:
                current.trailing.append(text.strip())
            elif own_line and _continues(fields_, tok, text):
                fields_[-1].trailing.append(text.strip())
                fields_[-1].last = tok.start[0]
            elif own_line:
                pending.append(text.strip())
            continue
        elif tok.type == tokenize.NL and tok.line.strip() == "":
            pending = []              # a blank line: the block above belongs to no field
        elif tok.type == tokenize.NEWLINE:
            if current is not None:
                current.last = tok.start[0]
                fields_.append(current)
                current = None
            pending = []
            line_start = True
            continue
        if tok.type in _LAYOUT:
            continue
        if line_start and depth == 1 and tok.type == tokenize.NAME and _declares(tokens, i):
            current = _Field(tok.string, tok.start[0], before=pending)
            pending = []
        line_start = False
    # the block above and the comment beside are two sentences: a dash between them
    return {f.name: " — ".join(x for x in (" ".join(f.before), " ".join(f.trailing)) if x)
            for f in fields_}


def _declares(tokens: list, i: int) -> bool:
    """NAME `:` (an annotation) or NAME `=` (an Enum member, a plain class attribute)."""
    nxt = next((t for t in tokens[i + 1:] if t.type not in _LAYOUT), None)
    return nxt is not None and nxt.type == tokenize.OP and nxt.string in (":", "=")


def _continues(fields_: list[_Field], tok, text: str) -> bool:
    """An own-line comment on the line after a field's trailing comment whose text is indented
    (`#` then two spaces or more): the trailing comment goes on, it does not open a new block."""
    last = fields_[-1] if fields_ else None
    return (last is not None and bool(last.trailing) and tok.start[0] == last.last + 1
            and text.startswith("  "))


def inherited_comments(cls: type) -> dict[str, str]:
    """field_comments of `cls` and of the classes its `class` statement names as bases (read
    from the source: a TypedDict keeps no bases at run time), its own comment first."""
    out: dict[str, str] = {}
    for c in _declared_bases(cls):
        for name, text in field_comments(c).items():
            if text and not out.get(name):
                out[name] = text
    return out


def _declared_bases(cls: type) -> list[type]:
    module = sys.modules[cls.__module__]
    node = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    found = [cls]
    for base in node.bases:
        b = getattr(module, base.id, None) if isinstance(base, ast.Name) else None
        if isinstance(b, type) and b.__module__ == cls.__module__:
            found += [c for c in _declared_bases(b) if c not in found]
    return found
