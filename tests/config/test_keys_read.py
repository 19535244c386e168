"""Every leaf key of the schema is read somewhere in mens/ or tools/ (house rule: a config value
that nothing reads is a bug), or is listed in INFORMATIONAL with the reason it needs no reader.

"Read" is found in the source, not at run time: the Python files under mens/ (but mens/config,
which defines the keys and validates them — validating is not using) and tools/ are parsed, and
a leaf `parent.field` counts as read where the code loads the field from something that is that
parent:

    cfg.serve.host          s = cfg.serve; s.host         for src in spoke.sources: src.kind
    _get(spoke_cfg, "min_rating")    getattr(cfg.rung, which)   (which = "full_lr" if ... else ...)
    rung["path"]            for k in ARCH_KEYS: _field(rung, k)   (ARCH_KEYS a tuple of names)
    def build(src, out, ex): ex.merged    (called in the module as build(..., cfg.export, ...))

The parent is recognised by name: the expression's last attribute (`cfg.serve`), what a local
name was assigned from (`s = cfg.serve`, `for src in ...sources`), what the module's callers
pass for a parameter, or a name made of it (`spoke_cfg`). Field names with an underscore that
one schema class alone defines (`memory_gb`, `seq_len_hint`) are distinctive enough to count
wherever they are loaded; plain words (`name`, `kind`, `path`, `r`, `steps`, ...) count only
in their parent's context, since `.name` is everywhere. Stores (`hw.description = ...`),
keyword arguments, dict keys, f-string text, comments and docstrings never count, nor does a
loop that copies keys from one config to another (`for k in (...): hw[k] = getattr(base, k)`).

Keys that nothing reads and that are not informational are listed in UNREAD, each with the
evidence: their tests are strict xfails, so the suite shows them until the key is implemented or
removed, and fails (XPASS) once one is read, so the list cannot go stale.
"""
from __future__ import annotations

import ast
import typing
from collections import defaultdict
from dataclasses import fields, is_dataclass
from functools import lru_cache
from pathlib import Path

import pytest

from mens.config import schema

MENS = Path(schema.__file__).resolve().parent.parent
ROOT = MENS.parent
# The package, and the repository's tools (tools/make_corpus.py runs each spoke's admission
# check while it generates the shipped corpora). mens/config defines and validates the keys:
# validating a key is not using it.
SEARCHED = [MENS, ROOT / "tools"]
SKIP_DIRS = {MENS / "config"}
ROOT_OWNERS = {"cfg", "spec", "config", "conf"}   # what the whole MensConfig / RunSpec is called

# Read by no code, on purpose: a human reads them. One line each: why no reader is needed.
INFORMATIONAL = {
    "spoke.domain": "the spoke's one-line description for whoever reads conf/spoke/*.yaml",
    "spoke.profile": "what the spoke teaches, in words, for whoever reads conf/spoke/*.yaml",
    "spoke.admission.description": "says in words what admission.check verifies (the check "
                                   "itself is admission.check, run by tools/make_corpus.py)",
}

# Read by nothing and not informational: bugs to fix (implement or remove the key). Evidence
# for each; the lead decides. Strict xfail: remove an entry once its key is read.
UNREAD: dict[str, str] = {}


# --- the schema's leaves --------------------------------------------------------------------
def _unwrap(t):
    """A field's type → (the type inside Optional / List, whether it is a list)."""
    args = [a for a in typing.get_args(t) if a is not type(None)]
    if typing.get_origin(t) is typing.Union and len(args) == 1:
        t = args[0]
    if typing.get_origin(t) in (list, typing.List):
        return typing.get_args(t)[0], True
    return t, False


def leaves(cls=schema.MensConfig, prefix: str = "", parent: str = ""):
    """(dotted key, parent node name, field name, owning class) of every leaf of the schema.
    List items are `[]` (`spoke.sources[].weight`); a list of scalars is itself a leaf."""
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        t, is_list = _unwrap(hints[f.name])
        key = prefix + f.name
        if is_dataclass(t):
            yield from leaves(t, key + ("[]." if is_list else "."), f.name)
        else:
            yield key, parent, f.name, cls


def schema_classes(cls=schema.MensConfig, seen=None) -> set:
    seen = set() if seen is None else seen
    seen.add(cls)
    for t in typing.get_type_hints(cls).values():
        t, _ = _unwrap(t)
        if is_dataclass(t) and t not in seen:
            schema_classes(t, seen)
    return seen


def distinctive(field_name: str) -> bool:
    """Safe to count wherever it is loaded: has an underscore and one class alone defines it."""
    owners = [c for c in schema_classes() if field_name in {f.name for f in fields(c)}]
    return "_" in field_name and len(owners) == 1


# --- reads in the source --------------------------------------------------------------------
GROUPS = {p for _, p, *_ in leaves() if p}    # the nodes that hold leaves: hw, headroom, sources...


def _const(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


class Reads(ast.NodeVisitor):
    """Collect (owner names, field) for every load of a field-like name in one module."""

    def __init__(self, module_names: dict[str, set[str]], params: dict | None = None):
        self.reads: list[tuple[frozenset, str]] = []
        self.params = params or {}     # (function, parameter) → owners its callers pass
        self.calls: dict[tuple, set[str]] = defaultdict(set)   # (function, index | name) → owners
        self.defs: dict[str, list[str]] = {}                   # function → parameter names
        self.alias: dict[str, set[str]] = defaultdict(set)     # local name → owner names
        self.names: dict[str, set[str]] = dict(module_names)   # local name → field names it holds
        self.copying: set[str] = set()                         # loop names of copy loops

    # owners: what an expression is, by name
    def owners(self, node) -> set[str]:
        if isinstance(node, ast.Name):
            return {node.id} | self.alias.get(node.id, set())
        if isinstance(node, ast.Attribute):
            return {node.attr}
        if isinstance(node, ast.Subscript):
            c = _const(node.slice)
            return {c} if c else self.owners(node.value)
        if isinstance(node, ast.Call):
            out = {c for a in node.args[1:2] if (c := _const(a))}          # _get(x, "sources")
            out |= {c for a in node.args[:1] if (c := _const(a)) in GROUPS}  # load_option("spoke")
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("items", "values",
                                                                            "copy", "get"):
                out |= self.owners(node.func.value) if node.func.attr != "get" else \
                    {c for a in node.args[:1] if (c := _const(a))}
            if isinstance(node.func, ast.Name) and node.func.id in ("enumerate", "list", "tuple",
                                                                    "reversed", "sorted"):
                out |= set().union(*(self.owners(a) for a in node.args)) if node.args else set()
            return out
        if isinstance(node, (ast.IfExp, ast.BoolOp)):
            parts = [node.body, node.orelse] if isinstance(node, ast.IfExp) else node.values
            return set().union(*(self.owners(p) for p in parts))
        return set()

    def field_names(self, node) -> set[str]:
        """The field names an expression stands for: "x", a name bound to constants."""
        if (c := _const(node)) is not None:
            return {c}
        if isinstance(node, ast.Name) and node.id not in self.copying:
            return self.names.get(node.id, set())
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "keys":
            return self.field_names(node.func.value)
        if isinstance(node, ast.IfExp):
            return self.field_names(node.body) | self.field_names(node.orelse)
        return set()

    def read(self, base, names) -> None:
        owners = frozenset(self.owners(base))
        for n in names:
            self.reads.append((owners, n))

    # bindings
    def _bind(self, target, value) -> None:
        if isinstance(target, ast.Name):
            self.alias[target.id] |= self.owners(value)
            held = _names_of(value) or self.field_names(value)
            if held:
                self.names[target.id] = self.names.get(target.id, set()) | held
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
            for i, t in enumerate(target.elts):
                if values is not None and i < len(values):
                    self._bind(t, values[i])
                elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and \
                        value.func.id == "enumerate" and i == 1:
                    self._bind(t, value.args[0])
                elif isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and \
                        value.func.attr == "items" and i == 0 and isinstance(t, ast.Name):
                    held = self.field_names(value.func.value)   # for k, v in X.items(): X's keys
                    if held:
                        self.names[t.id] = self.names.get(t.id, set()) | held
                elif isinstance(t, ast.Name):
                    self._bind(t, value)

    def visit_FunctionDef(self, node):          # a function's names are its own
        saved = self.alias
        self.alias = defaultdict(set, {k: set(v) for k, v in saved.items()})
        args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        self.defs[node.name] = [a.arg for a in args]
        for a in args:   # `def build(src, out, ex)` called as build(..., cfg.export): ex is export
            self.alias.pop(a.arg, None)
            self.alias[a.arg] |= self.params.get((node.name, a.arg), set())
        self.generic_visit(node)
        self.alias = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node):
        for t in node.targets:
            self._bind(t, node.value)
        self.generic_visit(node)

    def _loop(self, target, iter_, body) -> None:
        self._bind(target, iter_)
        if isinstance(target, ast.Name) and any(_stores_by(n, target.id) for b in body
                                                 for n in ast.walk(b)):
            self.copying.add(target.id)

    def visit_For(self, node):
        self._loop(node.target, node.iter, node.body)
        self.generic_visit(node)
        if isinstance(node.target, ast.Name):
            self.copying.discard(node.target.id)

    def visit_comprehension(self, node):
        self._loop(node.target, node.iter, [])
        self.generic_visit(node)

    def visit_ListComp(self, node):            # generators first: they bind the names
        for g in node.generators:
            self.visit(g)
        self.visit(node.elt)

    visit_SetComp = visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node):
        for g in node.generators:
            self.visit(g)
        self.visit(node.key)
        self.visit(node.value)

    # loads
    def visit_Attribute(self, node):
        if isinstance(node.ctx, ast.Load):
            self.read(node.value, {node.attr})
        self.generic_visit(node)

    def visit_Subscript(self, node):
        if isinstance(node.ctx, ast.Load):
            self.read(node.value, self.field_names(node.slice))
        self.generic_visit(node)

    def visit_Call(self, node):
        f = node.func
        if isinstance(f, ast.Attribute):            # x.method(...) is not a field read of x
            self.visit(f.value)
            if f.attr in ("get", "pop", "select") and node.args:
                if f.attr == "select" and len(node.args) > 1:   # OmegaConf.select(x, "a.b")
                    path = _const(node.args[1]) or ""
                    if path.count("."):
                        *parts, last = path.split(".")
                        self.reads.append((frozenset({parts[-1]}), last))
                else:
                    self.read(f.value, self.field_names(node.args[0]))
        else:
            self.visit(f)
            if len(node.args) >= 2:                 # getattr(x, "f"), _field(x, "f"), _get(...)
                self.read(node.args[0], self.field_names(node.args[1]))
            if isinstance(f, ast.Name):             # what a module function's parameters are
                for i, a in enumerate(node.args):
                    self.calls[(f.id, i)] |= self.owners(a)
                for k in node.keywords:
                    if k.arg:
                        self.calls[(f.id, k.arg)] |= self.owners(k.value)
        for a in [*node.args, *node.keywords]:
            self.visit(a)

    def visit_JoinedStr(self, node):              # f-string text is a message, not a read
        for v in node.values:
            if isinstance(v, ast.FormattedValue):
                self.visit(v.value)


def _params(v: Reads) -> dict:
    """(function, parameter) → owners, from the call sites one pass saw."""
    out: dict = defaultdict(set)
    for (fn, where), owners in v.calls.items():
        names = v.defs.get(fn)
        if names is None:
            continue
        if isinstance(where, int):
            if where < len(names):
                out[(fn, names[where])] |= owners
        else:
            out[(fn, where)] |= owners
    return out


def _names_of(value) -> set[str]:
    """Field names a literal holds: ("a", "b"), ["a"], {"a": 1} (keys)."""
    if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
        return {c for e in value.elts if (c := _const(e))}
    if isinstance(value, ast.Dict):
        return {c for k in value.keys if k is not None and (c := _const(k))}
    return set()


def _stores_by(node, name: str) -> bool:
    """`x[name] = ...` or `setattr(x, name, ...)`: the loop copies what it reads."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
        return isinstance(node.slice, ast.Name) and node.slice.id == name
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
        node.func.id == "setattr" and len(node.args) > 1 and \
        isinstance(node.args[1], ast.Name) and node.args[1].id == name


def source_files() -> list[Path]:
    return sorted(p for top in SEARCHED if top.is_dir() for p in top.rglob("*.py")
                  if not any(d in p.parents for d in SKIP_DIRS))


@lru_cache(maxsize=None)
def all_reads() -> tuple[tuple[frozenset, str, str], ...]:
    """(owner names, field, file) of every load in the searched files."""
    out = []
    for path in source_files():
        tree = ast.parse(path.read_text(), str(path))
        module_names = {t.id: _names_of(node.value) for node in tree.body
                        if isinstance(node, ast.Assign) for t in node.targets
                        if isinstance(t, ast.Name) and _names_of(node.value)}
        first = Reads(module_names)
        first.visit(tree)
        v = Reads(module_names, _params(first))    # again, parameters now known by their callers
        v.visit(tree)
        rel = str(path.relative_to(ROOT))
        out += [(owners, name, rel) for owners, name in v.reads]
    return tuple(out)


def _matches_parent(owners: frozenset, parent: str) -> bool:
    if not parent:
        return bool(owners & ROOT_OWNERS)
    accepted = {parent, parent.rstrip("s")}          # sources → source
    return any(o in accepted or parent in o.split("_") for o in owners)


def readers(key: str, parent: str, name: str, reads=None) -> list[str]:
    """Files where the leaf is read (empty: read nowhere)."""
    reads = all_reads() if reads is None else reads
    free = distinctive(name)
    return sorted({f for owners, n, f in reads
                   if n == name and (free or _matches_parent(owners, parent))})


LEAVES = list(leaves())


@pytest.mark.parametrize("key, parent, name", [
    pytest.param(k, p, n, marks=pytest.mark.xfail(strict=True, reason=f"unread: {UNREAD[k]}"))
    if k in UNREAD else (k, p, n)
    for k, p, n, _ in LEAVES if k not in INFORMATIONAL],
    ids=[k for k, *_ in LEAVES if k not in INFORMATIONAL])
def test_key_is_read(key, parent, name):
    found = readers(key, parent, name)
    assert found, (f"`{key}` is read by nothing in mens/: implement it, remove it from "
                   f"mens/config/schema.py, or (if a human reads it) list it in INFORMATIONAL "
                   f"with the reason.")


def test_lists_name_real_keys():
    keys = {k for k, *_ in LEAVES}
    assert not (set(INFORMATIONAL) | set(UNREAD)) - keys, "entries for keys the schema lacks"
    assert not set(INFORMATIONAL) & set(UNREAD)
    assert all(INFORMATIONAL.values()) and all(UNREAD.values()), "one line of reason each"


def test_walk_covers_every_schema_class():
    names = {c.__name__ for c in schema_classes()}
    assert names >= {"HwConfig", "RungConfig", "LaneConfig", "LoraConfig", "QuantConfig",
                     "DpoConfig", "OptimizerConfig", "TrainConfig", "PlanConfig", "ExportConfig",
                     "ServeConfig", "CompareConfig", "CalibrateConfig", "SpokeConfig",
                     "SourceConfig", "AdmissionConfig", "CurriculumConfig", "HeadroomPolicy",
                     "LightningDefaults", "LoggerConfig"}
    keys = {k for k, *_ in LEAVES}
    assert {"hw.headroom.frac", "spoke.sources[].weight", "lane.dpo.loss", "logger.kind",
            "hw.devices", "curriculum.caps"} <= keys
    assert len(source_files()) > 30 and all_reads()


def test_the_search_does_not_pass_trivially():
    """A key nobody reads fails, even one named like something read everywhere."""
    reads = all_reads()
    assert not readers("train.zz_unused_knob", "train", "zz_unused_knob", reads)
    assert not readers("train.name", "train", "name", reads)     # `.name` is everywhere
    assert not readers("compare.kind", "compare", "kind", reads)
    assert not readers("export.host", "export", "host", reads)   # serve.host is read
    assert readers("serve.host", "serve", "host", reads)


def test_search_understands_the_forms_it_claims(tmp_path):
    """The forms in the module docstring each count; stores, messages and copies do not."""
    code = '''
ARCH = ("alpha_one", "beta_two")
def f(cfg, spoke_cfg, rung, base, hw):
    s = cfg.serve
    s.host
    for src in spoke_cfg.sources:
        src.kind
    _get(spoke_cfg, "min_rating")
    which = "full_lr" if cfg else "lora_lr"
    getattr(cfg.rung, which)
    rung["path"]
    {k: _field(rung, k) for k in ARCH}
    hw.description = "x"
    print(f"serve.port {cfg.lane.name}")
    for k in ("tflops_bf16", "bandwidth_gbs"):
        hw[k] = getattr(base, k)
'''
    v = Reads({"ARCH": {"alpha_one", "beta_two"}})
    v.visit(ast.parse(code))
    reads = tuple((o, n, "x.py") for o, n in v.reads)

    def seen(parent, name):
        return bool([1 for o, n, _ in reads if n == name and _matches_parent(o, parent)])
    assert seen("serve", "host") and seen("sources", "kind") and seen("spoke", "min_rating")
    assert seen("rung", "full_lr") and seen("rung", "lora_lr") and seen("rung", "path")
    assert seen("rung", "alpha_one") and seen("rung", "beta_two")
    assert seen("lane", "name")                                   # the f-string's expression
    assert not seen("hw", "description")                          # a store
    assert not seen("serve", "port")                              # f-string text
    assert not any(n == "bandwidth_gbs" for _, n, _ in reads)     # a copy loop
