"""The import architecture of mens, read statically (ast) from every module under mens/.

Every import counts: module level and inside functions, methods and classes; `import a.b`,
`from a import b` (relative ones resolved), `importlib.import_module("literal")`. Only the body
of an `if TYPE_CHECKING:` block is skipped (it never runs). The rules:

1. Config and planning stay light: mens.config.*, mens.plan.*, mens.source.*, mens.run.*,
   mens.errors and mens.resources import none of HEAVY (torch, transformers, ...), not even in a function, except
   the device probe mens.plan.detect, which may import torch lazily, and mens.data.sources,
   which may import `datasets` lazily (for `data=hf`; it imports no torch). Transitively too: no light
   module imports a mens module that loads HEAVY at any depth (importing mens.a.b also runs
   mens/__init__.py and mens/a/__init__.py, so those count).
2. Nothing outside mens/cli/ imports mens.cli (the shell), but the entry shims: files named
   __main__.py and mens/fit.py.
3. Stage boundaries: mens.serve and mens.export never import mens.train.
4. No private names across modules: no `from mens.x import _y`, no `mens.x._y` or `alias._y`
   through a module bound by an import, no private module mens.x._impl from outside mens.x.
5. mens/errors.py imports nothing from mens.
6. No import cycles among mens modules (module- and function-level imports are both edges).
7. The package order (ORDER): a package imports only packages on its own level or below, never
   one above it; every package has a level; and packages do not import each other in a cycle,
   even through modules that are not themselves in a cycle. The entry shims (__main__.py files,
   mens/fit.py) stand outside the order.

Each rule is a plain function of the graph `collect_imports` builds; the self-tests at the end
run the same functions on a fake tree that breaks every rule.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PKG, ROOT = "mens", Path(__file__).resolve().parent.parent
HEAVY = {"torch", "transformers", "lightning", "peft", "bitsandbytes", "safetensors",
         "accelerate", "datasets"}
LIGHT = ("mens.config", "mens.plan", "mens.errors", "mens.run", "mens.resources", "mens.source")
# Lazy imports a light module's chain may make, and why: the device probe may import torch;
# `data=hf` must read the dataset before planning (`datasets` imports no torch/transformers).
PROBES = {"mens.plan.detect": {"torch"}, "mens.data.sources": {"datasets"}}


@dataclass(frozen=True)
class Imp:
    file: str          # the importing file, relative to the root: mens/plan/spec.py
    line: int
    target: str        # the module imported (the submodule for `from pkg import submodule`)
    name: str | None   # the name taken from it (`from target import name`), else None
    lazy: bool         # inside a function
    text: str          # what the line imports, resolved: `from mens.x import y`

    def __str__(self):
        return f"{self.file}:{self.line}: {self.text}"


@dataclass(repr=False)
class Graph:
    modules: dict[str, str] = field(default_factory=dict)        # module -> file
    imports: dict[str, list[Imp]] = field(default_factory=dict)  # module -> its imports
    attrs: dict[str, list[Imp]] = field(default_factory=dict)    # module -> `mens.x.y` uses

    def __repr__(self):
        return f"Graph({len(self.modules)} modules)"


def _within(mod: str, pkg: str) -> bool:
    return mod == pkg or mod.startswith(pkg + ".")


class _Reader(ast.NodeVisitor):
    def __init__(self, g: Graph, mod: str):
        self.g, self.file = g, g.modules[mod]
        self.package = mod if self.file.endswith("__init__.py") else mod.rpartition(".")[0]
        self.depth, self.aliases, self.imports, self.attrs = 0, {}, [], []  # alias -> module

    def add(self, node, target, name=None, text=None):
        text = text or (f"from {target} import {name}" if name else f"import {target}")
        self.imports.append(Imp(self.file, node.lineno, target, name, self.depth > 0, text))

    def resolve(self, module: str | None, level: int) -> str:
        base = self.package.split(".")[:len(self.package.split(".")) - level + 1] if level else []
        return ".".join(base + ([module] if module else []))

    def visit_FunctionDef(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1
    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_If(self, node):
        if getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            node = ast.Module(body=node.orelse, type_ignores=[])   # the else branch only
        self.generic_visit(node)

    def visit_Import(self, node):
        for a in node.names:
            self.add(node, a.name)
            if _within(a.name, PKG):
                self.aliases[a.asname or PKG] = a.name if a.asname else PKG

    def visit_ImportFrom(self, node):
        base = self.resolve(node.module, node.level)
        for a in node.names:
            if f"{base}.{a.name}" in self.g.modules:   # `from pkg import submodule`
                self.add(node, f"{base}.{a.name}", text=f"from {base} import {a.name}")
                self.aliases[a.asname or a.name] = f"{base}.{a.name}"
            else:
                self.add(node, base, None if a.name == "*" else a.name)

    def visit_Call(self, node):
        f, args = node.func, node.args
        if getattr(f, "attr", getattr(f, "id", None)) in ("import_module", "__import__") and \
                args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str):
            name = args[0].value
            level = len(name) - len(name.lstrip("."))
            self.add(node, self.resolve(name[level:] or None, level),
                     text=f"{ast.unparse(f)}({name!r})")
        self.generic_visit(node)

    def visit_Attribute(self, node):
        chain, n = [], node
        while isinstance(n, ast.Attribute):
            chain, n = [n.attr, *chain], n.value
        if not (isinstance(n, ast.Name) and n.id in self.aliases):
            return self.generic_visit(node)
        full = ".".join([self.aliases[n.id], *chain])   # inner Attributes: this same chain
        self.attrs.append(Imp(self.file, node.lineno, full, None, self.depth > 0,
                              f"{'.'.join([n.id, *chain])}  (= {full})"))


def collect_imports(root: Path) -> Graph:
    """Every module under root/mens, with the imports each one makes (read statically)."""
    g = Graph()
    for path in sorted((root / PKG).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        mod = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        g.modules[mod] = path.relative_to(root).as_posix()
    for mod, file in g.modules.items():
        reader = _Reader(g, mod)
        reader.visit(ast.parse((root / file).read_text(encoding="utf-8"), filename=file))
        g.imports[mod], g.attrs[mod] = reader.imports, reader.attrs
    return g


def _internal(g: Graph, mod: str):
    """(import, mens module it reaches) for each statement of mod importing another module."""
    seen = set()
    for imp in g.imports[mod]:
        parts = imp.target.split(".")
        dep = next((m for i in range(len(parts), 0, -1)   # the longest prefix that is a module
                    if (m := ".".join(parts[:i])) in g.modules), None)
        if _within(imp.target, PKG) and dep and dep != mod and (imp.line, dep) not in seen:
            seen.add((imp.line, dep))
            yield imp, dep


def _heavy(mod: str, imp: Imp) -> str | None:
    top = imp.target.split(".")[0]
    return top if top in HEAVY and not (
        imp.lazy and top in PROBES.get(mod, ())) else None


def _heavy_hit(why: dict[str, str], mod: str, dep: str) -> str | None:
    """The first of dep and its parent packages (all run when it is imported) that is heavy."""
    ran = [dep] + [dep.rsplit(".", k)[0] for k in range(1, dep.count(".") + 1)]
    return next((d for d in ran if d in why and d != mod), None)


def heavy_reasons(g: Graph) -> dict[str, str]:
    """Module -> why importing it loads HEAVY (a shortest chain), for the heavy modules."""
    why = {}
    for mod in g.modules:
        for imp in g.imports[mod]:
            if top := _heavy(mod, imp):
                why.setdefault(mod, f"{top} ({imp.file}:{imp.line})")
    while new := {mod: f"{hit} -> {why[hit]}" for mod in g.modules if mod not in why
                  if (hit := next(filter(None, (_heavy_hit(why, mod, d)
                                                for _, d in _internal(g, mod))), None))}:
        why.update(new)
    return why


def violations_light(g: Graph) -> list[str]:
    """config/plan/source/run/errors/resources must not load heavy ML packages, directly or through
    another mens module (a chain of light modules is reported where it leaves the light set)"""
    why, out = heavy_reasons(g), []
    for mod in (m for m in g.modules if any(_within(m, p) for p in LIGHT)):
        out += [f"{imp}  [{'lazy ' if imp.lazy else ''}import of {top}]"
                for imp in g.imports[mod] if (top := _heavy(mod, imp))]
        out += [f"{imp}  [heavy: {hit} -> {why[hit]}]" for imp, dep in _internal(g, mod)
                if (hit := _heavy_hit(why, mod, dep)) and not any(_within(hit, p) for p in LIGHT)]
    return out


def violations_cli(g: Graph) -> list[str]:
    """nothing outside mens/cli/ imports mens.cli, but __main__.py shims and mens/fit.py"""
    return [str(imp) for mod, file in g.modules.items() if not _within(mod, "mens.cli")
            and mod != "mens.fit" and not file.endswith("/__main__.py")
            for imp, dep in _internal(g, mod) if _within(dep, "mens.cli")]


def violations_stages(g: Graph) -> list[str]:
    """mens.serve and mens.export must not import mens.train"""
    return [str(imp) for mod in g.modules if _within(mod, "mens.serve") or
            _within(mod, "mens.export") for imp, dep in _internal(g, mod)
            if _within(dep, "mens.train")]


def violations_private(g: Graph) -> list[str]:
    """no _private name (or _private module, outside its package) imported across mens modules"""
    out = []
    for mod in g.modules:
        for imp in g.imports[mod] + g.attrs[mod]:
            parts = imp.target.split(".") + ([imp.name] if imp.name else [])
            for i, part in enumerate(parts if _within(imp.target, PKG) else []):
                owner, mine = ".".join(parts[:i]), ".".join(parts[:i + 1])
                if part.startswith("_") and not part.startswith("__") and not (
                        mod == owner or (mine in g.modules and _within(mod, owner))):
                    out.append(str(imp))
                    break
    return out


def violations_errors(g: Graph) -> list[str]:
    """mens/errors.py must import nothing from mens"""
    return [str(i) for i in g.imports.get("mens.errors", []) if _within(i.target, PKG)]


# The package order, lowest first: data flows up this list (a run dir is read by everyone; a model
# comes from source; data is read before synthesis curates it; the plan reads both; stages above).
ORDER = (("errors", "resources", "run"), ("config",), ("source",), ("data",), ("synth",),
         ("plan",), ("model",), ("objective",),
         ("train", "export", "serve", "calibrate", "cloud", "launch"),
         ("compare", "eval"), ("gate", "push"), ("recommend",), ("ladder",), ("afk",), ("studio",),
         ("cli",))
LEVEL = {pkg: i for i, level in enumerate(ORDER) for pkg in level}


def package(mod: str) -> str:
    """mens.plan.spec -> plan; mens.errors -> errors; mens -> mens"""
    return mod.split(".")[1] if "." in mod else mod


def _shim(g: Graph, mod: str) -> bool:
    return mod == f"{PKG}.fit" or g.modules[mod].endswith("/__main__.py") or mod == PKG


def _package_edges(g: Graph) -> dict[str, dict[str, Imp]]:
    """package -> {package it imports: the first import making that edge}, shims left out"""
    edges: dict[str, dict[str, Imp]] = {}
    for mod in sorted(g.modules):
        if not _shim(g, mod):
            for imp, dep in _internal(g, mod):
                if package(dep) != package(mod) and dep != PKG:
                    edges.setdefault(package(mod), {}).setdefault(package(dep), imp)
    return edges


def violations_order(g: Graph) -> list[str]:
    """a package imports only packages on its level of ORDER or below, has a level, and no two
    packages import each other in a cycle"""
    out = [f"{g.modules[m]}: package {package(m)!r} has no level in ORDER (place it there)"
           for m in sorted(g.modules) if not _shim(g, m) and package(m) not in LEVEL
           and m == f"{PKG}.{package(m)}"]
    for mod in sorted(g.modules):
        if _shim(g, mod) or package(mod) not in LEVEL:
            continue
        out += [f"{imp}  [{package(mod)} (level {LEVEL[package(mod)]}) imports "
                f"{package(dep)} (level {LEVEL[package(dep)]})]" for imp, dep in _internal(g, mod)
                if LEVEL.get(package(dep), -1) > LEVEL[package(mod)]]
    edges = _package_edges(g)
    return out + ["package cycle: " + " -> ".join(
        [c[0]] + [f"{b} ({edges[a][b]})" for a, b in zip(c, c[1:])]) for c in cycles(edges)]


def cycles(edges: dict[str, dict]) -> list[list[str]]:
    """A shortest cycle through each node of a graph {node: {neighbour: …}}, each cycle once
    (breadth-first from every node, in sorted order): [a, b, …, a]."""
    seen, out = set(), []
    for start in sorted(edges):
        paths, frontier, cycle = {start: [start]}, [start], None
        while frontier and not cycle:
            frontier, nxt = [], frontier
            for m in nxt:
                for d in sorted(edges.get(m, {})):
                    if d == start:
                        cycle = cycle or paths[m] + [start]
                    elif d not in paths:
                        paths[d] = paths[m] + [d]
                        frontier.append(d)
        if cycle and frozenset(cycle) not in seen:
            seen.add(frozenset(cycle))
            out.append(cycle)
    return out


def violations_cycles(g: Graph) -> list[str]:
    """mens modules must not import each other in a cycle"""
    edges = {m: {} for m in g.modules}   # module -> {dependency: the first import making it}
    for mod in g.modules:
        for imp, dep in _internal(g, mod):
            edges[mod].setdefault(dep, imp)
    return [" -> ".join([c[0]] + [f"{b} ({edges[a][b].file}:{edges[a][b].line})"
                                  for a, b in zip(c, c[1:])]) for c in cycles(edges)]


RULES = {"light": violations_light, "cli": violations_cli, "stages": violations_stages,
         "private": violations_private, "errors": violations_errors, "cycles": violations_cycles,
         "order": violations_order}


@pytest.fixture(scope="module")
def real_graph() -> Graph:
    return collect_imports(ROOT)


def _check(rule, graph: Graph):
    if found := rule(graph):
        pytest.fail(f"{' '.join(rule.__doc__.split())}; {len(found)} violation(s):\n  "
                    + "\n  ".join(found), pytrace=False)


def test_collects_the_real_tree(real_graph):
    assert {"mens.plan.spec", "mens.cli", "mens.train.run"} <= set(real_graph.modules)
    assert any(i.target == "torch" for i in real_graph.imports["mens.model.load"])


# one test per rule; a failure lists every offending `file:line: import`
def test_config_and_plan_stay_light(real_graph): _check(violations_light, real_graph)
def test_nothing_imports_the_cli_shell(real_graph): _check(violations_cli, real_graph)
def test_serve_and_export_never_import_train(real_graph): _check(violations_stages, real_graph)
def test_no_private_names_across_modules(real_graph): _check(violations_private, real_graph)
def test_errors_imports_nothing_from_mens(real_graph): _check(violations_errors, real_graph)
def test_no_import_cycles(real_graph): _check(violations_cycles, real_graph)
def test_packages_keep_their_order(real_graph): _check(violations_order, real_graph)


def test_every_package_has_a_level(real_graph):
    packages = {package(m) for m in real_graph.modules if "." in m and
                real_graph.modules[m].endswith("__init__.py")}
    assert packages <= set(LEVEL), f"packages without a level in ORDER: {packages - set(LEVEL)}"


# ---- the rules can fail: the same functions on a fake tree that breaks each one ------------
FAKE = {   # file under mens/ -> its text (every folder gets an __init__.py)
    "errors.py": "from mens.run import rundir\n", "run/rundir.py": "", "train/run.py": "",
    "__main__.py": "from mens.cli.app import main\n",                         # shim: allowed
    "cli/app.py": "from mens.plan import bad\n",
    "plan/bad.py": "def f():\n    import torch\n",
    "plan/indirect.py": "from mens.model.load import load\n",
    "plan/detect.py": "def probe():\n    import torch\n",                     # allowed
    "model/load.py": "import os\ndef load():\n    from transformers import AutoModel\n",
    "serve/__init__.py": "from . import _impl, y\n",                          # allowed
    "serve/x.py": "import mens.train.run\nimport importlib\n"
                  "importlib.import_module('mens.cli.app')\n",
    "serve/_impl.py": "y = 1\n",
    "serve/y.py": "from ._impl import y\n",                                    # allowed
    "data/a.py": "from . import b\n",
    "data/b.py": "def f():\n    from mens.data.a import g\n",
    "data/c.py": "from mens.model.load import _cache\nimport mens.model.load as ml\n"
                 "ml._state.clear()\nfrom mens.serve._impl import y\n",
    # order: source reaching up into plan; gate <-> serve (serve may not import gate: a package
    # cycle through modules that are no module cycle); a package with no level
    "source/up.py": "def f():\n    from mens.plan.bad import f\n",
    "serve/slots.py": "from mens.gate.receipt import ok\n",
    "gate/receipt.py": "ok = 1\n",
    "gate/run.py": "from mens.serve.y import y\n",
    "nowhere/m.py": "",
}
EXPECTED = {   # rule -> (what it must report, what it must not)
    "light": (["mens/plan/bad.py:2: import torch  [lazy import of torch]",
               "mens/plan/indirect.py:1: from mens.model.load import load  "
               "[heavy: mens.model.load -> transformers (mens/model/load.py:3)]"], ["detect.py"]),
    "cli": (["mens/serve/x.py:3: importlib.import_module('mens.cli.app')"], ["__main__.py"]),
    "stages": (["mens/serve/x.py:1: import mens.train.run"], []),
    "private": (["mens/data/c.py:1: from mens.model.load import _cache",
                 "mens/data/c.py:3: ml._state.clear  (= mens.model.load._state.clear)",
                 "mens/data/c.py:4: from mens.serve._impl import y"], ["serve/y.py", "__init__"]),
    "errors": (["mens/errors.py:1: from mens.run import rundir"], []),
    "cycles": (["mens.data.a -> mens.data.b (mens/data/a.py:1) -> mens.data.a (mens/data/b.py:2)"],
               ["mens.serve"]),
    "order": (["mens/source/up.py:2: from mens.plan.bad import f  [source (level 2) imports plan "
               "(level 5)]",
               "mens/serve/slots.py:1: from mens.gate.receipt import ok  [serve (level 8) imports "
               "gate (level 10)]",
               "package cycle: gate -> serve (mens/gate/run.py:1: from mens.serve.y import y) -> "
               "gate (mens/serve/slots.py:1: from mens.gate.receipt import ok)",
               "mens/nowhere/__init__.py: package 'nowhere' has no level in ORDER (place it there)"],
              ["mens/__main__.py", "cli/app.py"]),
}


@pytest.fixture
def fake_graph(tmp_path) -> Graph:
    for rel, text in FAKE.items():
        path = tmp_path / PKG / rel
        for folder in [path.parent, *path.parent.parents][:len(Path(rel).parts)]:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "__init__.py").touch()
        path.write_text(text)
    return collect_imports(tmp_path)


@pytest.mark.parametrize("rule", list(RULES))
def test_rule_reports_a_fake_violation(rule, fake_graph):
    found = RULES[rule](fake_graph)
    must, must_not = EXPECTED[rule]
    assert [t for t in must if t not in found] == [], f"rule {rule} missed some; it said: {found}"
    assert [f for f in found for t in must_not if t in f] == [], f"rule {rule} over-reported"
