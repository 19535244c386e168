"""Topic trees: one YAML per spoke or dataset (`DIR/tree.yaml`), human-editable and
diff-friendly. Synthesis asks the teacher per LEAF, so a tree of depth D × branching B spreads a
dataset over B^D distinct topics instead of one prompt's 50 near-duplicates.

    spoke: structured_shell
    root:
      id: root
      label: structured_shell
      description: shell commands with structured, parseable output
      difficulty: [1, 10]          # min, max (1-10), inherited by new children
      seeds: []                    # seed prompts (few_shot_seed shows them)
      target: 8                    # samples wanted at each leaf below (synth.per_leaf wins)
      verified: 0                  # samples admitted by the oracle (synthesis writes it)
      children: [...]              # the same keys, recursively

A child's id is its parent's id (but `root`) + `/` + a slug of its label, so ids are readable
and stable when siblings are added. `mens data tree expand` asks the teacher (mens_subtopics)
for `tree.branching` subtopics of every node above `tree.depth` that has no children, passing
the node's path and its existing siblings so it does not repeat them; `prune` removes a node,
`add` adds a child (`tree.label`), `regen` drops a node's children and asks again.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mens.errors import DataError

KEYS = ("id", "label", "description", "difficulty", "seeds", "target", "verified", "children")


@dataclass
class Node:
    id: str
    label: str
    description: str = ""
    difficulty: list[int] = field(default_factory=lambda: [1, 10])
    seeds: list[str] = field(default_factory=list)
    target: int = 8
    verified: int = 0
    children: list["Node"] = field(default_factory=list)

    def walk(self, path: tuple["Node", ...] = ()):
        """(node, its path from the root's first child down) for every node, depth first."""
        here = (*path, self)
        yield self, here
        for c in self.children:
            yield from c.walk(here)

    def as_dict(self) -> dict:
        return {"id": self.id, "label": self.label, "description": self.description,
                "difficulty": list(self.difficulty), "seeds": list(self.seeds),
                "target": self.target, "verified": self.verified,
                "children": [c.as_dict() for c in self.children]}


@dataclass
class Tree:
    spoke: str
    root: Node
    path: Path | None = None

    def nodes(self):
        return self.root.walk()

    def leaves(self) -> list[tuple[Node, list[str]]]:
        """(leaf, topic path of labels below the root) in file order; a bare root is a leaf."""
        return [(n, [p.label for p in path[1:]] or [n.label])
                for n, path in self.nodes() if not n.children]

    def find(self, node_id: str) -> tuple[Node, Node | None]:
        """(node, its parent) or DataError naming the ids there are."""
        for n, path in self.nodes():
            if n.id == node_id:
                return n, (path[-2] if len(path) > 1 else None)
        ids = [n.id for n, _ in self.nodes()]
        raise DataError(f"no node `{node_id}` in the tree (ids: {', '.join(ids[:20])}"
                        f"{' …' if len(ids) > 20 else ''}); set `tree.node` to one of them.",
                        path=self.path, key="tree.node")

    def add_child(self, parent: Node, label: str, description: str = "") -> Node | None:
        """A new child (None when a sibling has the same slug already)."""
        slug = slugify(label)
        if not slug or any(c.id.rsplit("/", 1)[-1] == slug for c in parent.children):
            return None
        node = Node(id=slug if parent is self.root else f"{parent.id}/{slug}", label=label.strip(),
                    description=description, difficulty=list(parent.difficulty),
                    target=parent.target)
        parent.children.append(node)
        return node

    def save(self, path: Path | None = None) -> Path:
        from mens.synth.dataset import write_durable

        path = Path(path or self.path)
        head = (f"# Topic tree of {self.spoke} (mens data tree): edit freely — ids must stay "
                f"unique;\n# `mens data tree expand|prune|add|regen` rewrite this file.\n")
        body = yaml.safe_dump({"spoke": self.spoke, "root": self.root.as_dict()},
                              sort_keys=False, allow_unicode=True, width=100,
                              default_flow_style=None)
        return write_durable(path, head + body)


def slugify(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")[:48]


def new_tree(spoke_cfg, path: Path) -> Tree:
    """The root of a spoke's tree: its domain and profile; the spoke's profile items as seeds."""
    root = Node(id="root", label=spoke_cfg.name, description=spoke_cfg.domain,
                seeds=[])
    tree = Tree(spoke=spoke_cfg.name, root=root, path=path)
    return tree


def load(path: Path) -> Tree:
    """Read and check a tree.yaml: a malformed one raises DataError naming the file and key."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise DataError(f"not valid YAML ({getattr(e, 'problem', None) or e}); fix the file or "
                        f"delete it to start a new tree.", path=path, line=line,
                        key="tree") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("root"), dict) \
            or not isinstance(raw.get("spoke"), str):
        raise DataError("a topic tree needs `spoke: NAME` and a `root:` node (keys "
                        f"{', '.join(KEYS)}).", path=path, key="root")
    seen: set[str] = set()
    root = _node(raw["root"], "root", path, seen)
    return Tree(spoke=raw["spoke"], root=root, path=path)


def _node(raw, where: str, path: Path, seen: set[str]) -> Node:
    def bad(key: str, why: str):
        return DataError(f"`{where}.{key}` {why}.", path=path, key=f"{where}.{key}")

    if not isinstance(raw, dict):
        raise DataError(f"`{where}` must be a mapping with keys {', '.join(KEYS)}.", path=path,
                        key=where)
    unknown = set(raw) - set(KEYS)
    if unknown:
        raise bad(sorted(unknown)[0], f"is not a node key (keys: {', '.join(KEYS)})")
    for key in ("id", "label"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise bad(key, "must be a non-empty string")
    if raw["id"] in seen:
        raise bad("id", f"repeats `{raw['id']}`: every node needs its own id")
    seen.add(raw["id"])
    diff = raw.get("difficulty", [1, 10])
    if not (isinstance(diff, list) and len(diff) == 2 and all(isinstance(d, int) for d in diff)
            and 1 <= diff[0] <= diff[1] <= 10):
        raise bad("difficulty", f"is {diff!r}: it must be [min, max] with 1 <= min <= max <= 10")
    seeds = raw.get("seeds", []) or []
    if not (isinstance(seeds, list) and all(isinstance(s, str) for s in seeds)):
        raise bad("seeds", "must be a list of strings (example prompts)")
    for key in ("target", "verified"):
        v = raw.get(key, 0 if key == "verified" else 8)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise bad(key, f"is {v!r}: it must be a whole number >= 0")
    desc = raw.get("description", "") or ""
    if not isinstance(desc, str):
        raise bad("description", "must be a string")
    kids = raw.get("children", []) or []
    if not isinstance(kids, list):
        raise bad("children", "must be a list of nodes")
    return Node(id=raw["id"], label=raw["label"], description=desc, difficulty=diff,
                seeds=seeds, target=raw.get("target", 8), verified=raw.get("verified", 0),
                children=[_node(c, f"{where}.children[{i}]", path, seen)
                          for i, c in enumerate(kids)])


def open_tree(cfg, out: Path) -> Tree:
    """DIR/tree.yaml, or a new tree (root only) for the spoke when there is none."""
    path = out / "tree.yaml"
    if path.is_file():
        tree = load(path)
        if tree.spoke != cfg.spoke.name:
            raise DataError(f"this tree belongs to spoke {tree.spoke}, but the command is for "
                            f"spoke={cfg.spoke.name}: give `spoke={tree.spoke}` or another "
                            f"`synth.out`.", path=path, key="spoke")
        return tree
    return new_tree(cfg.spoke, path)


# --- the teacher -------------------------------------------------------------------------
def subtopic_messages(tree: Tree, node: Node, path: tuple[Node, ...], k: int,
                      system: str | None) -> list[dict]:
    labels = " > ".join(p.label for p in path)
    siblings = [c.label for c in (path[-2].children if len(path) > 1 else []) if c is not node]
    have = [c.label for c in node.children]
    lines = [f"Task: subtopics. Expand: {labels}",
             f"Domain: {tree.root.description or tree.spoke}.",
             f"Give {k} distinct, concrete subtopics of `{node.label}`"
             + (f" ({node.description})" if node.description else "")
             + " for training examples, each a short label.",
             f"Difficulty range: {node.difficulty[0]}-{node.difficulty[1]} of 10."]
    if siblings or have:
        lines.append("These topics exist already; do not repeat them: "
                     + "; ".join([*siblings, *have]) + ".")
    msgs = [{"role": "user", "content": "\n".join(lines)}]
    return ([{"role": "system", "content": system}] if system else []) + msgs


def expand(tree: Tree, teacher, depth: int, branching: int, system: str | None = None,
           only: Node | None = None) -> dict:
    """Expand every childless node above `depth` (below `only` when given), level by level,
    saving the tree after each level. → counts."""
    counts = {"asked": 0, "added": 0, "invalid": 0}
    for _ in range(depth):
        todo = [(n, p) for n, p in (only or tree.root).walk(_prefix(tree, only))
                if not n.children and len(p) - 1 < depth]
        if not todo:
            break
        requests = [("mens_subtopics", subtopic_messages(tree, n, p, branching, system))
                    for n, p in todo]
        replies = teacher.ask_many(requests)
        added = 0
        for (n, _), reply in zip(todo, replies):
            counts["asked"] += 1
            if reply.data is None:
                counts["invalid"] += 1
                continue
            for label in reply.data["subtopics"][:branching]:
                added += tree.add_child(n, label) is not None
        counts["added"] += added
        tree.save()
        if not added:
            break
    return counts


def _prefix(tree: Tree, node: Node | None) -> tuple[Node, ...]:
    """The path above `node` (so depths stay measured from the root)."""
    if node is None or node is tree.root:
        return ()
    for n, path in tree.nodes():
        if n is node:
            return path[:-1]
    return ()
