"""The subset of Go's text/template that mens's Ollama TEMPLATEs use, evaluated as Go does.

Ollama cannot run here, and Python has no Go-template engine, so the Modelfile check
(mens/export/modelfile.py) renders a TEMPLATE with this small interpreter over the data Ollama
hands a template (mens/export/ollama.py). It follows text/template's rules where they bite:
`{{-`/`-}}` trim all ASCII white space, `.` is rebound by `range`, `$` is the data (or a
`template` call's argument), `$x :=` declares and `$x =` assigns in the enclosing scope, a map is
ranged in sorted key order, `and`/`or` return an operand, `eq a b c` is a == b || a == c, a value
with a String() method prints through it. Supported: text, `if`/`else if`/`else`, `range` (with
`$i, $x :=`), variables, `define`/`template`, `(…)` with a field chain after it, string/number/
bool literals, and the functions and/or/not/eq/ne/lt/le/gt/ge/len/index/slice plus Ollama's
`json`. Anything else — `with`, pipes `|`, comments, `printf`, `break`, an unknown function or
field — raises GoTemplateError: a TEMPLATE the checker cannot read fails the check, it never
passes unread. tests/export/test_modelfile_tools.py pins the rules, and
tests/export/test_gotemplate_go.py renders every TEMPLATE and probe with Go's own text/template
(where a Go toolchain is installed) and requires the same bytes.
"""
from __future__ import annotations

import re

from mens.export.govalues import (GoList, GoMap, GoOrderedMap, GoStruct,  # noqa: F401
                                  GoTemplateError, PropertyType, go_json, go_print, truth)

FUNCS = ("and", "or", "not", "eq", "ne", "lt", "le", "gt", "ge", "len", "index", "slice", "json")
_WS = " \t\r\n"


# ---- parsing ---------------------------------------------------------------------------------
_ACTION = re.compile(r"\{\{(- )?(.*?)( -)?\}\}", re.S)
_TOKEN = re.compile(r'\s*(\(|\)|"(?:[^"\\]|\\.)*"|:=|=(?!=)|,|\||[^\s(),|]+)')


def _tokens(body: str) -> list[str]:
    out, pos = [], 0
    while pos < len(body.rstrip()):
        m = _TOKEN.match(body, pos)
        if not m:
            raise GoTemplateError(f"TEMPLATE action {{{{ {body} }}}} does not parse")
        out.append(m.group(1))
        pos = m.end()
    return out


def parse(src: str) -> tuple[list, dict]:
    """(the main template's nodes, {defined name: nodes})."""
    pieces, last = [], 0
    for m in _ACTION.finditer(src):
        pieces.append(("text", src[last:m.start()]))
        pieces.append(("act", m.group(2).strip(), bool(m.group(1)), bool(m.group(3))))
        last = m.end()
    pieces.append(("text", src[last:]))
    for i, p in enumerate(pieces):                  # trim markers eat the neighbouring space
        if p[0] == "act" and p[2] and pieces[i - 1][0] == "text":
            pieces[i - 1] = ("text", pieces[i - 1][1].rstrip(_WS))
        if p[0] == "act" and p[3] and pieces[i + 1][0] == "text":
            pieces[i + 1] = ("text", pieces[i + 1][1].lstrip(_WS))
    defines: dict = {}
    nodes, end = _block(pieces, 0, defines, top=True)
    return nodes, defines


def _block(pieces, i, defines, top=False):
    """Nodes until an `end`/`else` at this level: (nodes, index of that piece)."""
    nodes = []
    while i < len(pieces):
        p = pieces[i]
        if p[0] == "text":
            if p[1]:
                nodes.append(("text", p[1]))
            i += 1
            continue
        body = p[1]
        word = body.split(None, 1)[0] if body else ""
        if body.startswith("/*"):
            raise GoTemplateError("TEMPLATE has a comment {{/* */}}: mens's checker reads none")
        if word in ("end", "else"):
            if top:
                raise GoTemplateError(f"TEMPLATE has an unmatched {{{{ {body} }}}}")
            return nodes, i
        if word in ("if", "range"):
            node, i = _branch(pieces, i, defines)
            nodes.append(node)
            continue
        if word == "define":
            name = _string(_tokens(body)[1:])
            sub, j = _block(pieces, i + 1, defines)
            if pieces[j][1] != "end":
                raise GoTemplateError(f"define {name!r} has an else")
            defines[name] = sub
            i = j + 1
            continue
        if word == "template":
            toks = _tokens(body)[1:]
            nodes.append(("template", _string(toks[:1]), _pipe(toks[1:]) if toks[1:] else None))
        elif word in ("with", "block", "break", "continue", "nil") or "|" in _tokens(body):
            raise GoTemplateError(f"TEMPLATE uses a Go construct mens does not check: "
                                  f"{{{{ {body} }}}}")
        else:
            nodes.append(_assign_or_pipe(_tokens(body)))
        i += 1
    if not top:
        raise GoTemplateError("TEMPLATE has an {{ if }}/{{ range }}/{{ define }} without {{ end }}")
    return nodes, i


def _branch(pieces, i, defines):
    toks = _tokens(pieces[i][1])
    kind = toks[0]
    if kind == "range":
        names, rest = [], toks[1:]
        if ":=" in rest:
            k = rest.index(":=")
            names = [t for t in rest[:k] if t != ","]
            rest = rest[k + 1:]
        head = ("range", names, _pipe(rest))
    else:
        head = ("if", _pipe(toks[1:]))
    body, j = _block(pieces, i + 1, defines)
    branches, other = [(head, body)], None
    while pieces[j][1] != "end":
        words = _tokens(pieces[j][1])
        if words[:2] == ["else", "if"] and kind == "if":
            sub, j2 = _block(pieces, j + 1, defines)
            branches.append((("if", _pipe(words[2:])), sub))
            j = j2
        elif words == ["else"]:
            other, j = _block(pieces, j + 1, defines)
            if pieces[j][1] != "end":
                raise GoTemplateError("TEMPLATE has a second {{ else }}")
        else:
            raise GoTemplateError(f"TEMPLATE uses {{{{ {pieces[j][1]} }}}} inside {kind}")
    return (kind, branches, other), j + 1


def _string(toks) -> str:
    if len(toks) != 1 or not toks[0].startswith('"'):
        raise GoTemplateError(f"expected a string literal, got {' '.join(toks)}")
    return _literal(toks[0])


def _literal(tok: str) -> str:
    import json
    return json.loads(tok)          # Go's "…" escapes are JSON's for what a TEMPLATE writes


def _assign_or_pipe(toks):
    if len(toks) > 2 and toks[0].startswith("$") and toks[1] in (":=", "="):
        return ("assign", toks[0], toks[1] == ":=", _pipe(toks[2:]))
    return ("print", _pipe(toks))


def _pipe(toks):
    """A command: [function name, args…] or [one operand]; operands are parsed to nodes."""
    args, i = [], 0
    while i < len(toks):
        t = toks[i]
        if t == "(":
            depth, j = 1, i + 1
            while depth:
                if j >= len(toks):
                    raise GoTemplateError("TEMPLATE has an unclosed (")
                depth += {"(": 1, ")": -1}.get(toks[j], 0)
                j += 1
            node = ("paren", _pipe(toks[i + 1:j - 1]))
            if j < len(toks) and toks[j].startswith(".") and toks[j] != ".":
                node = ("fields", node, toks[j][1:].split("."))
                j += 1
            args.append(node)
            i = j
            continue
        args.append(_operand(t))
        i += 1
    if not args:
        raise GoTemplateError("TEMPLATE has an empty action")
    if args[0][0] == "func":
        return ("call", args[0][1], args[1:])
    if len(args) != 1:
        raise GoTemplateError(f"TEMPLATE: {' '.join(toks)} is not a function call")
    return args[0]


def _operand(t: str):
    if t.startswith('"'):
        return ("lit", _literal(t))
    if re.fullmatch(r"-?\d+", t):
        return ("lit", int(t))
    if t in ("true", "false"):
        return ("lit", t == "true")
    if t == ".":
        return ("dot",)
    if t.startswith("."):
        return ("fields", ("dot",), t[1:].split("."))
    if t.startswith("$"):
        var, _, chain = t.partition(".")
        return ("fields", ("var", var), chain.split(".")) if chain else ("var", var)
    if t in FUNCS:
        return ("func", t)
    raise GoTemplateError(f"TEMPLATE uses a Go construct mens does not check: {t!r}")


# ---- evaluation ------------------------------------------------------------------------------
class _Scope:
    def __init__(self, parent=None):
        self.vars, self.parent = {}, parent

    def find(self, name):
        s = self
        while s is not None:
            if name in s.vars:
                return s
            s = s.parent
        raise GoTemplateError(f"TEMPLATE uses the undefined variable {name}")


def render(src: str, data) -> str:
    """Execute TEMPLATE `src` on `data` (a GoStruct/GoMap, as mens/export/ollama.py builds)."""
    nodes, defines = parse(src)
    out: list[str] = []
    scope = _Scope()
    scope.vars["$"] = data
    try:
        _run(nodes, data, scope, defines, out)
    except (TypeError, KeyError, IndexError) as e:   # Go fails the execution here too
        raise GoTemplateError(f"TEMPLATE fails on this data: {type(e).__name__}: {e}") from None
    return "".join(out)


def _run(nodes, dot, scope, defines, out) -> None:
    for n in nodes:
        kind = n[0]
        if kind == "text":
            out.append(n[1])
        elif kind == "print":
            out.append(go_print(_eval(n[1], dot, scope)))
        elif kind == "assign":
            _, name, declare, pipe = n
            value = _eval(pipe, dot, scope)
            (scope if declare else scope.find(name)).vars[name] = value
        elif kind == "template":
            if n[1] not in defines:
                raise GoTemplateError(f"TEMPLATE calls the undefined template {n[1]!r}")
            arg = _eval(n[2], dot, scope) if n[2] else None
            inner = _Scope()
            inner.vars["$"] = arg
            _run(defines[n[1]], arg, inner, defines, out)
        elif kind == "if":
            for (_, pipe), body in n[1]:
                if truth(_eval(pipe, dot, scope)):
                    _run(body, dot, _Scope(scope), defines, out)
                    break
            else:
                if n[2] is not None:
                    _run(n[2], dot, _Scope(scope), defines, out)
        elif kind == "range":
            (_, names, pipe), body = n[1][0]
            seq = _eval(pipe, dot, scope)
            if isinstance(seq, (GoOrderedMap, PropertyType)):
                raise GoTemplateError("TEMPLATE ranges over a value Go cannot range over")
            if isinstance(seq, dict):
                items = [(k, seq[k]) for k in sorted(seq)]
            elif isinstance(seq, list):
                items = list(enumerate(seq))
            elif seq is None:
                items = []
            else:
                raise GoTemplateError(f"range over {type(seq).__name__}")
            for k, v in items:
                inner = _Scope(scope)
                if len(names) == 1:
                    inner.vars[names[0]] = v
                elif len(names) == 2:
                    inner.vars[names[0]], inner.vars[names[1]] = k, v
                _run(body, v, inner, defines, out)
            if not items and n[2] is not None:
                _run(n[2], dot, _Scope(scope), defines, out)


def _field(v, name: str):
    if isinstance(v, GoStruct):
        if name not in v.fields:
            raise GoTemplateError(f"TEMPLATE reads .{name}, a field Ollama's data has not here")
        return v.fields[name]
    if isinstance(v, dict):
        return v.get(name)             # Ollama parses TEMPLATE with missingkey=zero
    raise GoTemplateError(f"TEMPLATE reads .{name} of a {type(v).__name__}")


def _eval(node, dot, scope):
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "dot":
        return dot
    if kind == "var":
        return scope.find(node[1]).vars[node[1]]
    if kind == "paren":
        return _eval(node[1], dot, scope)
    if kind == "fields":
        v = _eval(node[1], dot, scope)
        for name in node[2]:
            v = _field(v, name)
        return v
    if kind == "call":
        return _call(node[1], node[2], dot, scope)
    raise GoTemplateError(f"TEMPLATE: {node[1]} is a function; call it with arguments")


def _basic(v):
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    raise GoTemplateError(f"TEMPLATE compares a {type(v).__name__}: Go's eq/lt take basic "
                          f"values only")


def _call(f: str, args, dot, scope):
    if f in ("and", "or"):                        # short-circuit, returning the operand
        v = None
        for a in args:
            v = _eval(a, dot, scope)
            if truth(v) != (f == "and"):
                return v
        return v
    vals = [_eval(a, dot, scope) for a in args]
    if f == "not":
        return not truth(vals[0])
    if f in ("eq", "ne"):
        a = _basic(vals[0])
        hit = any(type(a) is type(_basic(b)) and a == b for b in vals[1:])
        if any(type(a) is not type(b) for b in vals[1:] if a is not None and b is not None):
            raise GoTemplateError(f"TEMPLATE: eq of incompatible types {vals!r}")
        return hit if f == "eq" else not hit
    if f in ("lt", "le", "gt", "ge"):
        a, b = _basic(vals[0]), _basic(vals[1])
        return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[f]
    if f == "len":
        v = vals[0]
        return len(v.encode()) if isinstance(v, str) else len(v)
    if f == "index":
        v = vals[0]
        for k in vals[1:]:
            if isinstance(v, dict):
                v = v.get(k)
            elif isinstance(v, list) and isinstance(k, int) and 0 <= k < len(v):
                v = v[k]
            else:
                raise GoTemplateError(f"TEMPLATE: index {k!r} out of range")
        return v
    if f == "slice":
        v, bounds = vals[0], vals[1:]
        cut = slice(bounds[0], bounds[1] if len(bounds) > 1 else None) if bounds else slice(None)
        if isinstance(v, str) and all(0 <= x <= len(v.encode()) for x in bounds):
            return v.encode()[cut].decode("utf-8", "replace")
        if isinstance(v, list) and all(0 <= x <= len(v) for x in bounds):
            return type(v)(v[cut])
        raise GoTemplateError(f"TEMPLATE: slice {bounds} out of range")
    if f == "json":
        return go_json(vals[0])
    raise GoTemplateError(f"TEMPLATE calls {f}, a function mens does not check")
