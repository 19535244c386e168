"""`mens data SUBCOMMAND [overrides]` / `python -m mens.data …`:

    inspect                      the data report (mens.data.inspect) — read only
    tree expand|prune|add|regen  the dataset's topic tree (mens.synth.tree)
    synth                        leaf-conditioned synthesis by a teacher (mens.synth.synth)
    curate ACTION                list / rate / tag / untag / edit / clean (mens.synth.curate)
    push                         the dataset to a Hub dataset repo + its card (mens.push.dataset)

Every subcommand takes the same Hydra overrides (`spoke=…`, `teacher=…`, `synth.out=DIR`, …).
No Hydra app: these read or edit a dataset where it lives and make no run dir (mens.cli.app's
`command` gives them the same error printer and exit codes)."""
from __future__ import annotations

import sys

from mens.cli.app import command, group_help, usage_error
from mens.errors import EXIT_OK

SUBCOMMANDS = ("inspect", "tree", "synth", "curate", "push")
TREE_ACTIONS = ("expand", "prune", "add", "regen")
CURATE_ACTIONS = ("list", "rate", "tag", "untag", "edit", "clean")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if group_help(argv, __doc__):
        return EXIT_OK
    if not argv or argv[0] not in SUBCOMMANDS:
        return usage_error(f"`mens data` takes a subcommand: {', '.join(SUBCOMMANDS)} (e.g. "
                           f"`mens data inspect data=file data.path=train.jsonl`, `mens data tree "
                           f"expand spoke=vox_lang tree.depth=3`, `mens data synth "
                           f"spoke=vox_lang`).")
    sub, rest = argv[0], argv[1:]
    action = None
    if sub in ("tree", "curate"):
        actions = TREE_ACTIONS if sub == "tree" else CURATE_ACTIONS
        if not rest or rest[0] not in actions:
            return usage_error(f"`mens data {sub}` takes an action: {', '.join(actions)} (e.g. "
                               f"`mens data {sub} {actions[0]} spoke=vox_lang`).")
        action, rest = rest[0], rest[1:]
    return command(_run, sub, action, rest)


def _run(sub: str, action: str | None, rest: list[str]) -> int:
    from mens.config.compose import compose

    cfg = compose(rest)
    if sub == "inspect":
        from mens.data.inspect import inspect
        print(inspect(cfg)["text"])
    elif sub == "tree":
        tree_command(cfg, action)
    elif sub == "synth":
        from mens.synth.synth import synth
        synth(cfg)
    elif sub == "push":
        from mens.push.dataset import push_dataset
        return push_dataset(cfg)
    else:
        from mens.synth.curate import curate
        curate(cfg, action)
    return EXIT_OK


def tree_command(cfg, action: str) -> dict:
    """expand / prune / add / regen on DIR/tree.yaml (mens.synth.tree)."""
    from mens.synth.dataset import dataset_dir
    from mens.synth.synth import system_prompt
    from mens.synth.tree import expand, open_tree
    from mens.errors import ConfigError

    t = cfg.tree
    tree = open_tree(cfg, dataset_dir(cfg))
    if action != "expand" and not t.node:
        raise ConfigError(f"`mens data tree {action}` needs `tree.node=ID` (an id in "
                          f"{tree.path}).", key="tree.node")
    node, parent = tree.find(t.node) if t.node else (tree.root, None)
    result: dict = {}
    if action == "prune":
        if parent is None:
            raise ConfigError("the root cannot be pruned: delete tree.yaml to start again.",
                              key="tree.node")
        parent.children.remove(node)
        result = {"pruned": node.id}
    elif action == "add":
        if not t.label:
            raise ConfigError("`mens data tree add` needs `tree.label=TEXT` (the new child of "
                              "`tree.node`).", key="tree.label")
        child = tree.add_child(node, t.label, t.description)
        if child is None:
            raise ConfigError(f"`{node.id}` has a child like `{t.label}` already.",
                              key="tree.label")
        result = {"added": child.id}
    if action in ("expand", "regen"):
        from mens.synth.teacher import Ledger, Teacher
        if action == "regen":
            node.children.clear()
        ledger = Ledger()
        teacher = Teacher.from_config(cfg.teacher, ledger)
        try:
            depth = t.depth if node is tree.root else t.depth + len(_path(tree, node)) - 1
            result = expand(tree, teacher, depth, t.branching, system_prompt(cfg.spoke),
                            only=None if node is tree.root else node)
        finally:
            from mens.synth.dataset import write_stats
            write_stats(tree.path.parent, None, None, cfg, tree_teacher=ledger.as_dict())
    tree.save()
    leaves = tree.leaves()
    print(f"mens data tree {action}: {result}; {sum(1 for _ in tree.nodes())} nodes, "
          f"{len(leaves)} leaves → {tree.path}")
    return result


def _path(tree, node):
    return next(p for n, p in tree.nodes() if n is node)
