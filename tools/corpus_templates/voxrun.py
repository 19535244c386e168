"""A tree-walking interpreter for Vox ASTs (mens/vox.py), so every output a vox_lang record
claims ("prints 42") is what the program really prints, not what a template assumed."""
from __future__ import annotations

from mens.synth.vox import vox_check


class VoxRuntimeError(Exception):
    pass


class _Return(Exception):
    def __init__(self, value):
        self.value = value


def fmt(v, inner: bool = False) -> str:
    if v is True or v is False:
        return "true" if v else "false"
    if v is None:
        return "nil"
    if isinstance(v, list):
        return "[" + ", ".join(fmt(x, True) for x in v) + "]"
    if isinstance(v, str) and inner:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(v)


def truthy(v) -> bool:
    return v not in (False, None, 0, "") and v != []


def run(src: str, limit: int = 200_000) -> list[str]:
    """Run a program; returns printed lines, raises VoxRuntimeError (message like a real one)."""
    prog, out, steps = vox_check(src), [], [0]
    fns = {s[1]: s for s in prog if s[0] == "fn"}

    def builtin(name, a):
        if name == "print":
            out.append(fmt(a[0]))
            return None
        if name == "len":
            return len(a[0])
        if name == "push":
            a[0].append(a[1])
            return None
        if name == "pop":
            if not a[0]:
                raise VoxRuntimeError("pop from an empty list")
            return a[0].pop()
        if name == "str":
            return fmt(a[0])
        if name == "range":
            return list(range(a[0], a[1]))
        if name == "join":
            return a[1].join(fmt(x) for x in a[0])
        return abs(a[0])

    def lookup(scopes, name):
        for s in reversed(scopes):
            if name in s:
                return s
        return None

    def ev(e, scopes):
        k = e[0]
        if k in ("int", "str", "const"):
            return e[1]
        if k == "name":
            return lookup(scopes, e[1])[e[1]]
        if k == "list":
            return [ev(x, scopes) for x in e[1]]
        if k == "index":
            obj, i = ev(e[1], scopes), ev(e[2], scopes)
            if not isinstance(i, int) or not -len(obj) <= i < len(obj):
                raise VoxRuntimeError(f"index {fmt(i)} out of range for length {len(obj)}")
            return obj[i]
        if k == "un":
            v = ev(e[2], scopes)
            return (not truthy(v)) if e[1] == "not" else -v
        if k == "call":
            args = [ev(a, scopes) for a in e[2]]
            name = e[1][1]
            if name in fns:
                f = fns[name]
                try:
                    block(f[3], [dict(zip(f[2], args))])
                except _Return as r:
                    return r.value
                return None
            return builtin(name, args)
        op, left = e[1], ev(e[2], scopes)
        if op == "and":
            return truthy(left) and truthy(ev(e[3], scopes))
        if op == "or":
            return truthy(left) or truthy(ev(e[3], scopes))
        right = ev(e[3], scopes)
        if op in ("==", "!="):
            return (left == right) == (op == "==")
        if op == "+" and type(left) is not type(right):
            raise VoxRuntimeError(f"cannot add {type(left).__name__.replace('str', 'string')} "
                                  f"and {type(right).__name__.replace('str', 'string')}; "
                                  f"convert with str()")
        if op in ("/", "%") and right == 0:
            raise VoxRuntimeError("division by zero")
        if op in ("/", "%"):       # integer division truncates toward zero, exactly
            q = abs(left) // abs(right) * (1 if (left >= 0) == (right > 0) else -1)
            return q if op == "/" else left - right * q
        result = {"+": lambda: left + right, "-": lambda: left - right, "*": lambda: left * right,
                "<": lambda: left < right, "<=": lambda: left <= right,
                ">": lambda: left > right, ">=": lambda: left >= right}[op]()
        if isinstance(result, int) and not isinstance(result, bool) and abs(result) >= 2 ** 63:
            raise VoxRuntimeError("integer overflow (Vox integers are 64-bit)")
        return result

    def block(stmts, scopes):
        for s in stmts:
            steps[0] += 1
            if steps[0] > limit:
                raise VoxRuntimeError("step limit exceeded (infinite loop?)")
            k = s[0]
            if k == "let":
                scopes[-1][s[1]] = ev(s[2], scopes)
            elif k == "assign":
                v = ev(s[2], scopes)
                t = s[1]
                if t[0] == "name":
                    lookup(scopes, t[1])[t[1]] = v
                else:
                    obj, i = ev(t[1], scopes), ev(t[2], scopes)
                    if not -len(obj) <= i < len(obj):
                        raise VoxRuntimeError(f"index {i} out of range for length {len(obj)}")
                    obj[i] = v
            elif k == "if":
                branch = s[2] if truthy(ev(s[1], scopes)) else s[3]
                if branch:
                    block(branch, scopes + [{}])
            elif k == "while":
                while truthy(ev(s[1], scopes)):
                    block(s[2], scopes + [{}])
            elif k == "for":
                for item in list(ev(s[2], scopes)):
                    block(s[3], scopes + [{s[1]: item}])
            elif k == "return":
                raise _Return(ev(s[1], scopes) if s[1] else None)
            elif k == "expr":
                ev(s[1], scopes)
    try:
        block([s for s in prog if s[0] != "fn"], [{}])
    except (TypeError, AttributeError) as e:   # a template bug, not a Vox error: be loud
        raise RuntimeError(f"Vox template produced an ill-typed program: {e}\n{src}") from e
    return out
