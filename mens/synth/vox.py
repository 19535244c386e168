"""Vox, the house scripting language of the vox_lang spoke: its reference lexer, parser and
static resolver. The grammar below is the definition; `vox_check(src)` returns the AST or raises
VoxError whose text (`error[V003] 4:12: expected ...`) is what the corpus's diagnostic-repair
records quote, so those diagnostics are real output of this parser, not invented prose.
"""
from __future__ import annotations

import re

# program := stmt*            block := '{' stmt* '}'          comments: '#' to end of line
# stmt    := 'let' NAME '=' expr ';' | 'fn' NAME '(' [NAME {',' NAME}] ')' block   (top level only)
#          | 'if' expr block ['else' (if-stmt | block)] | 'while' expr block
#          | 'for' NAME 'in' expr block | 'return' [expr] ';' | target '=' expr ';' | expr ';'
# expr    := or;  or := and {'or' and};  and := cmp {'and' cmp};  cmp := add [CMPOP add]
# add     := mul {('+'|'-') mul};  mul := unary {('*'|'/'|'%') unary};  unary := ('-'|'not') unary | post
# post    := primary {'(' [expr {',' expr}] ')' | '[' expr ']'}
# primary := INT | STRING | 'true' | 'false' | 'nil' | NAME | '[' [expr {',' expr}] ']' | '(' expr ')'
# Names resolve statically: a function sees its parameters, its own locals, every top-level fn
# and the builtins — not top-level lets (Vox closures do not capture; pass values in).
BUILTINS = {"print": 1, "len": 1, "push": 2, "pop": 1, "str": 1, "range": 2, "join": 2, "abs": 1}
KEYWORDS = {"let", "fn", "if", "else", "while", "for", "in", "return", "and", "or", "not",
            "true", "false", "nil"}
TOKEN = re.compile(r"\s+|#[^\n]*|(?P<int>\d+)|(?P<name>[A-Za-z_]\w*)|(?P<str>\")"
                   r"|(?P<op>==|!=|<=|>=|[-+*/%<>=(){}\[\],;])")
CMP = {"==", "!=", "<", "<=", ">", ">="}


class VoxError(Exception):
    def __init__(self, code: str, line: int, col: int, message: str):
        super().__init__(f"error[{code}] {line}:{col}: {message}")
        self.code, self.line, self.col = code, line, col


def vox_tokens(src: str) -> list[tuple]:
    out, i, line, start = [], 0, 1, 0
    while i < len(src):
        m = TOKEN.match(src, i)
        if not m:
            raise VoxError("V001", line, i - start + 1, f"unexpected character `{src[i]}`")
        col = i - start + 1
        if m.group("str"):                       # strings: "..." with \" \\ \n escapes
            j, buf = i + 1, []
            while j < len(src) and src[j] not in '"\n':
                if src[j] == "\\" and j + 1 < len(src) and src[j + 1] in '"\\n':
                    buf.append({"n": "\n"}.get(src[j + 1], src[j + 1]))
                    j += 2
                else:
                    buf.append(src[j])
                    j += 1
            if j >= len(src) or src[j] != '"':
                raise VoxError("V002", line, col, "unterminated string literal")
            out.append(("str", "".join(buf), line, col))
            i = j + 1
            continue
        kind = m.lastgroup
        if kind == "name" and m.group() in KEYWORDS:
            kind = "kw"
        if kind:
            out.append((kind, int(m.group()) if kind == "int" else m.group(), line, col))
        for k, ch in enumerate(m.group()):
            if ch == "\n":
                line, start = line + 1, i + k + 1
        i = m.end()
    out.append(("eof", "end of input", line, i - start + 1))
    return out


class VoxParser:
    def __init__(self, src: str):
        self.toks, self.i, self.depth = vox_tokens(src), 0, 0

    def peek(self, value=None) -> bool:
        t = self.toks[self.i]
        return value is None or (t[0] in ("op", "kw") and t[1] == value)

    def next(self) -> tuple:
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, value: str, why: str = "") -> tuple:
        if not self.peek(value):
            t = self.toks[self.i]
            shown = t[1] if t[0] != "str" else f'"{t[1]}"'
            raise VoxError("V003", t[2], t[3], f"expected `{value}`{why}, found `{shown}`")
        return self.next()

    def name(self, what: str) -> tuple:
        t = self.next()
        if t[0] != "name":
            raise VoxError("V003", t[2], t[3], f"expected {what}, found `{t[1]}`")
        return t

    def program(self) -> list:
        body = []
        while self.toks[self.i][0] != "eof":
            body.append(self.stmt(top=True))
        return body

    def block(self) -> list:
        self.expect("{", " to open a block")
        body = []
        while not self.peek("}"):
            if self.toks[self.i][0] == "eof":
                t = self.toks[self.i]
                raise VoxError("V003", t[2], t[3], "expected `}` to close the block, found end of input")
            body.append(self.stmt())
        self.next()
        return body

    def stmt(self, top: bool = False) -> tuple:
        t = self.toks[self.i]
        if self.peek("let"):
            self.next()
            n = self.name("a name after `let`")
            self.expect("=", " in let-binding")
            e = self.expr()
            self.expect(";", " after let-binding")
            return ("let", n[1], e, n[2], n[3])
        if self.peek("fn"):
            if not top:
                raise VoxError("V003", t[2], t[3], "`fn` definitions are only allowed at top level")
            self.next()
            n = self.name("a function name")
            self.expect("(", " after the function name")
            params = []
            while not self.peek(")"):
                params.append(self.name("a parameter name")[1])
                if not self.peek(")"):
                    self.expect(",", " between parameters")
            self.next()
            return ("fn", n[1], params, self.block(), n[2], n[3])
        if self.peek("if"):
            self.next()
            cond, then, other = self.expr(), self.block(), None
            if self.peek("else"):
                self.next()
                other = [self.stmt()] if self.peek("if") else self.block()
            return ("if", cond, then, other)
        if self.peek("while"):
            self.next()
            return ("while", self.expr(), self.block())
        if self.peek("for"):
            self.next()
            n = self.name("a loop variable after `for`")
            self.expect("in", " after the loop variable")
            return ("for", n[1], self.expr(), self.block(), n[2], n[3])
        if self.peek("return"):
            self.next()
            e = None if self.peek(";") else self.expr()
            self.expect(";", " after return")
            return ("return", e, t[2], t[3])
        e = self.expr()
        if self.peek("="):
            if e[0] not in ("name", "index"):
                raise VoxError("V003", t[2], t[3], "only a name or an index can be assigned to")
            self.next()
            v = self.expr()
            self.expect(";", " after assignment")
            return ("assign", e, v, t[2], t[3])
        self.expect(";", " after expression")
        return ("expr", e)

    def expr(self) -> tuple:
        return self.binary(0)

    LEVELS = [{"or"}, {"and"}, CMP, {"+", "-"}, {"*", "/", "%"}]

    def binary(self, level: int) -> tuple:
        if level == len(self.LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.toks[self.i][0] in ("op", "kw") and self.toks[self.i][1] in self.LEVELS[level]:
            op = self.next()[1]
            left = ("bin", op, left, self.binary(level + 1))
            if level == 2 and self.toks[self.i][1] in CMP:   # a < b < c is ambiguous: refuse
                t = self.toks[self.i]
                raise VoxError("V003", t[2], t[3], "comparisons do not chain; use `and`")
        return left

    def unary(self) -> tuple:
        if self.peek("-") or self.peek("not"):
            return ("un", self.next()[1], self.unary())
        e = self.primary()
        while self.peek("(") or self.peek("["):
            t = self.next()
            if t[1] == "(":
                args = []
                while not self.peek(")"):
                    args.append(self.expr())
                    if not self.peek(")"):
                        self.expect(",", " between arguments")
                self.next()
                at = e[2:4] if e[0] == "name" else t[2:4]    # point at the callee's name
                e = ("call", e, args, *at)
            else:
                e = ("index", e, self.expr())
                self.expect("]", " to close the index")
        return e

    def primary(self) -> tuple:
        t = self.next()
        if t[0] == "int":
            return ("int", t[1])
        if t[0] == "str":
            return ("str", t[1])
        if t[0] == "name":
            return ("name", t[1], t[2], t[3])
        if t[1] in ("true", "false", "nil") and t[0] == "kw":
            return ("const", {"true": True, "false": False, "nil": None}[t[1]])
        if t[1] == "[" and t[0] == "op":
            items = []
            while not self.peek("]"):
                items.append(self.expr())
                if not self.peek("]"):
                    self.expect(",", " between list items")
            self.next()
            return ("list", items)
        if t[1] == "(" and t[0] == "op":
            e = self.expr()
            self.expect(")", " to close the parenthesis")
            return e
        raise VoxError("V003", t[2], t[3], f"expected an expression, found `{t[1]}`")


def vox_resolve(prog: list) -> None:
    """Static names: undefined names (V004), arity (V005), return outside fn (V006), assignment
    to an undeclared name (V007), redeclaration in one scope (V008)."""
    fns = {s[1]: len(s[2]) for s in prog if s[0] == "fn"}
    arity = {**BUILTINS, **fns}

    def declare(scope: set, name: str, line: int, col: int):
        if name in scope:
            raise VoxError("V008", line, col, f"`{name}` is already declared in this scope")
        scope.add(name)

    def visible(scopes, name):
        return any(name in s for s in scopes) or name in arity

    def ex(e, scopes):
        k = e[0]
        if k == "name" and not visible(scopes, e[1]):
            raise VoxError("V004", e[2], e[3], f"undefined name `{e[1]}`")
        if k == "call":
            ex(e[1], scopes)
            for a in e[2]:
                ex(a, scopes)
            if e[1][0] == "name" and e[1][1] in arity and not any(e[1][1] in s for s in scopes):
                want = arity[e[1][1]]
                if want != len(e[2]):
                    raise VoxError("V005", e[3], e[4], f"`{e[1][1]}` takes {want} argument"
                                   f"{'s' * (want != 1)}, {len(e[2])} given")
        elif k == "bin":
            ex(e[2], scopes), ex(e[3], scopes)
        elif k in ("un", "index"):
            ex(e[1] if k == "index" else e[2], scopes)
            if k == "index":
                ex(e[2], scopes)
        elif k == "list":
            for a in e[1]:
                ex(a, scopes)

    def body(stmts, scopes, in_fn):
        for s in stmts:
            k = s[0]
            if k == "let":
                ex(s[2], scopes)
                declare(scopes[-1], s[1], s[3], s[4])
            elif k == "fn":
                body(s[3], [set(s[2])], True)
            elif k == "if":
                ex(s[1], scopes)
                body(s[2], scopes + [set()], in_fn)
                if s[3]:
                    body(s[3], scopes + [set()], in_fn)
            elif k == "while":
                ex(s[1], scopes)
                body(s[2], scopes + [set()], in_fn)
            elif k == "for":
                ex(s[2], scopes)
                body(s[3], scopes + [{s[1]}], in_fn)
            elif k == "return":
                if not in_fn:
                    raise VoxError("V006", s[2], s[3], "`return` outside a function")
                if s[1]:
                    ex(s[1], scopes)
            elif k == "assign":
                target = s[1]
                if target[0] == "name" and not any(target[1] in sc for sc in scopes):
                    raise VoxError("V007", s[3], s[4], f"assignment to undeclared `{target[1]}`; "
                                   f"declare it first with `let {target[1]} = ...;`")
                ex(target, scopes), ex(s[2], scopes)
            else:
                ex(s[1], scopes)
    body(prog, [set()], False)


def vox_check(src: str) -> list:
    """Parse and resolve a Vox program; returns its AST or raises VoxError."""
    prog = VoxParser(src).program()
    vox_resolve(prog)
    return prog
