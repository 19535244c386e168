"""The docs' reference pages, generated from the code: the commands from the command table,
every config key of the run spec with its type, default and comment, the telemetry vocabulary,
the metric names, the exit codes. `python -m tools.docs.reference` writes them to
docs/reference/ (committed, so the README's links resolve on GitHub too; a test fails when they
drift from the code), and the site's build writes them again (mkdocs-gen-files runs
tools/docs/gen_pages.py), so a built site is never older than its code.

Torch-free and fast: the schema, the telemetry vocabulary, mens.errors and the command table
are imported (none of them imports torch); modules that do import it (the trainer's logged
metric names, the eval modules) are read with `ast`, never imported. Each page function returns
Markdown; tests call them (tests/docs/test_reference.py).
"""
from __future__ import annotations

import ast
import dataclasses
import re
import typing
from dataclasses import dataclass
from pathlib import Path

import yaml

from tools.docs.comments import field_comments, inherited_comments

MENS = Path(__file__).resolve().parents[2] / "mens"
GENERATED = ("This page is generated from the code ({src}) by `python -m tools.docs.reference`; "
             "edit the code, not this page.")


# --- helpers ---------------------------------------------------------------------------------
def md(text: str) -> str:
    """Prose for a table cell: pipes, angle brackets and stars escaped outside `code` spans."""
    parts = text.replace("\n", " ").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = (parts[i].replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
                    .replace("*", "\\*"))
    return "`".join(parts)


def code(text: str) -> str:
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _yaml(value) -> str:
    if isinstance(value, str):
        return value if value else '""'
    out = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    return out.removesuffix("...").strip()


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows), ""]


def _source(module: str) -> Path:
    """A mens module's file, found without importing it."""
    path = MENS.parent.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _constant(module: str, name: str):
    """A literal module-level constant, read without importing its module (which may import
    torch)."""
    for node in ast.parse(_source(module).read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name
                                                for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"{module} has no constant {name}")


def _docstring(module: str, name: str | None = None) -> str:
    """A module's docstring, or that of its function or class `name` (read, not imported)."""
    tree = ast.parse(_source(module).read_text())
    if name is not None:
        tree = next(n for n in tree.body if getattr(n, "name", None) == name)
    return ast.get_docstring(tree) or ""


def sentence(text: str) -> str:
    return md(text[:1].upper() + text[1:]).rstrip(".") + "." if text else ""


def _own_doc(cls) -> str:
    doc = cls.__dict__.get("__doc__") or ""
    return "" if doc.startswith(cls.__name__ + "(") else " ".join(doc.split())   # dataclass's own


# --- commands --------------------------------------------------------------------------------
def commands_page() -> str:
    from mens.cli import COMMANDS, command_table

    lines = ["# Commands", "", GENERATED.format(src="`mens.cli.command_table()`"), "",
             "Every command takes Hydra overrides (`key=value`, `+group=option`); "
             "`mens NAME --help` prints its config. Exit codes: [exit codes](exit-codes.md); "
             "config keys: [config](config.md).", ""]
    lines += _table(("command", "what it does"),
                    [(f"[`mens {n}`](#{n})", md(s)) for n, s, _ in command_table()])
    for name, summary, python_m in command_table():
        lines += [f"## {name}", "", sentence(summary), "",
                  "```sh", f"mens {name} [overrides]", f"python -m {python_m} [overrides]",
                  "```", "", f"Implemented by `{COMMANDS[name].main}`.", ""]
    return "\n".join(lines)


# --- config ----------------------------------------------------------------------------------
@dataclass
class ConfigKey:
    key: str                  # dotted; a list of sections' fields: `spoke.sources[].name`
    type: str
    default: str
    comment: str
    section: bool             # a nested dataclass: its keys follow


def _nested(tp):
    """The dataclass inside a field's type (X, Optional[X], List[X]) and whether it is a list."""
    if dataclasses.is_dataclass(tp):
        return tp, False
    args = typing.get_args(tp)
    inner = [a for a in args if dataclasses.is_dataclass(a)]
    if inner:
        return inner[0], typing.get_origin(tp) in (list, typing.List)
    return None, False


def _type_name(f: dataclasses.Field) -> str:
    return f.type if isinstance(f.type, str) else getattr(f.type, "__name__", repr(f.type))


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if value == "???":                       # omegaconf.MISSING: a group option sets it
        return "required"
    if dataclasses.is_dataclass(value):
        return "(section)"
    return _yaml(value)


def config_keys(root=None, prefix: str = "") -> list[ConfigKey]:
    """Every key of the run spec, depth first in declaration order, found by walking the root
    config dataclass's fields' types; each comment is read from the class that declares it."""
    if root is None:
        from mens.config.schema import MensConfig as root
    hints = typing.get_type_hints(root)
    comments = field_comments(root)
    out = []
    for f in dataclasses.fields(root):
        inner, is_list = _nested(hints[f.name])
        key = prefix + f.name
        default = "(section)" if inner and _default(f) == "required" else _default(f)
        out.append(ConfigKey(key, _type_name(f), default, comments.get(f.name, ""),
                             section=inner is not None))
        if inner is not None:
            out += config_keys(inner, key + ("[]." if is_list else "."))
    return out


def _group_options(group: str) -> list[str]:
    from mens.resources import CONF_DIR, option_names

    return option_names(group) if (CONF_DIR / group).is_dir() else []


def config_page() -> str:
    from mens.config.schema import MensConfig
    from mens.resources import option_names

    keys = config_keys()
    hints = typing.get_type_hints(MensConfig)
    lines = ["# Config", "", GENERATED.format(src="the run spec's schema dataclasses, from "
                                             "`mens.config.schema.MensConfig` down"), "",
             "Set any key on the command line (`mens train train.max_steps=20`) or in a recipe. "
             "*required*: a group option sets it (`+hw=h200`, `lane=qlora`); *(section)*: its "
             "keys follow. `auto` knobs are typed `Any` and checked after composition. "
             f"Recipes (`+recipe=NAME`): {', '.join(map(code, option_names('recipe')))}.", ""]
    top = [k for k in keys if "." not in k.key and not k.section]
    lines += ["## Top level", ""]
    lines += _table(("key", "type", "default", "meaning"), [_row(k) for k in top])
    for f in dataclasses.fields(MensConfig):
        inner, _ = _nested(hints[f.name])
        if inner is None:
            continue
        head = next(k for k in keys if k.key == f.name)
        lines += [f"## {f.name}", ""]
        about = " ".join(x for x in (head.comment, _own_doc(inner)) if x)
        if about:
            lines += [md(about), ""]
        options = _group_options(f.name)
        if options:
            lines += [f"Options (conf/{f.name}/): "
                      f"{', '.join(map(code, options))}.", ""]
        lines += _table(("key", "type", "default", "meaning"),
                        [_row(k) for k in keys if k.key.startswith(f.name + ".")])
    return "\n".join(lines)


def _row(k: ConfigKey) -> tuple[str, ...]:
    return (code(k.key), code(k.type), code(k.default) if k.default not in ("required",
            "(section)") else f"*{k.default}*", md(k.comment))


# --- telemetry -------------------------------------------------------------------------------
def telemetry_page() -> str:
    from mens.run import telemetry as t

    events = field_comments(t.Event)
    lines = ["# Telemetry", "", GENERATED.format(src="`mens.run.telemetry`"), "",
             "Every run writes `telemetry.jsonl` into its run dir: one JSON object per event, in "
             "the order below, each with `event` and `time` (unix seconds). *always*: the writer "
             "fills it in every row of that event; other fields may be absent (a reading a "
             "backend cannot give is `null`). Rows may carry more fields than listed (a lane's "
             "own step metrics).", ""]
    lines += _table(("event", "when"), [(f"[`{e.value}`](#{e.value.lower()})", md(events[e.name]))
                                        for e in t.Event])
    for e in t.Event:
        row = t.ROWS[e]
        comments = inherited_comments(row)
        required = t.required(e)
        lines += [f"## {e.value}", "", sentence(events[e.name])
                  + (" Terminal: no row of this session follows." if e in t.TERMINAL else ""),
                  ""]
        fields = [(code(name), code(_annotation(tp)), "always" if name in required else "",
                   md(comments.get(name, ""))) for name, tp in row.__annotations__.items()]
        lines += _table(("field", "type", "written", "meaning"), fields)
    return "\n".join(lines)


def _annotation(tp) -> str:
    if isinstance(tp, typing.ForwardRef):
        return tp.__forward_arg__
    return tp if isinstance(tp, str) else getattr(tp, "__name__", repr(tp))


# --- metrics ---------------------------------------------------------------------------------
EVAL_MODULES = ("mens.eval.indomain", "mens.eval.toolcalls", "mens.eval.judge")


def metrics_page() -> str:
    from mens.run import telemetry as t

    logged = _constant("mens.train.trainer", "METRICS")
    step = inherited_comments(t.TrainStep)
    lines = ["# Metrics", "", GENERATED.format(src="`mens.train.trainer.METRICS`, the eval "
                                               "modules' row docs"), "",
             "## Training", "",
             "Every optimizer step's numbers go to each logger (`logger=wandb|csv|tensorboard`) "
             "under these names, x-axis the step; the same numbers are the `TRAIN_STEP` row's "
             "fields in [telemetry](telemetry.md#train_step).", ""]
    lines += _table(("logged as", "TRAIN_STEP field", "meaning"),
                    [(code(name), code(f), md(step.get(f, ""))) for f, name in logged.items()])
    held_out = " ".join(_docstring("mens.train.trainer", "HeldOutEval").split())
    names = " ".join(_docstring("mens.train.trainer", "eval_metric").split())
    lines += [f"Held out during training (`train.eval_every`): {md(held_out)} Named: {md(names)}",
              ""]
    doc = _docstring("mens.eval")
    shape = doc[doc.find("\neval.json") + 1:]   # from the row's shape on
    lines += ["## Eval", "",
              "`mens eval` writes `eval.json`; every number in it is a *metric row*, read by the "
              "gate, compare, the ladder and the studio (from `mens.eval`):", "",
              "```text", shape, "```", ""]
    for module in EVAL_MODULES:
        about = _rows_section(_docstring(module))
        if about:
            lines += [f"### {module.rsplit('.', 1)[1]}", "", f"From `{module}`:", "",
                      "```text", about, "```", ""]
    return "\n".join(lines)


def _rows_section(doc: str) -> str:
    """The paragraphs of a module docstring from the one that names its rows (`Row`, `Rows`)
    to the next blank line after the names."""
    paras = doc.split("\n\n")
    for i, p in enumerate(paras):
        if re.search(r"\bRows?\b", p):
            out = [p]
            if i + 1 < len(paras) and "/" in paras[i + 1].split("\n")[0]:
                out.append(paras[i + 1])   # the names listed after "Rows (…):"
            return "\n\n".join(out)
    return ""


# --- exit codes ------------------------------------------------------------------------------
def exit_codes_page() -> str:
    import mens.errors as errors

    classes = [c for c in vars(errors).values()
               if isinstance(c, type) and issubclass(c, errors.MensError)]
    codes = sorted({v for k, v in vars(errors).items() if k.startswith("EXIT_")})
    lines = ["# Exit codes", "", GENERATED.format(src="`mens.errors`"), "",
             *(md(" ".join(p.split())) + "\n" for p in _docstring("mens.errors").split("\n\n"))]
    rows = []
    for c in codes:
        name = next(k for k, v in vars(errors).items() if k.startswith("EXIT_") and v == c)
        raised = [f"`{k.__name__}`: {md(_own_doc(k))}" for k in classes
                  if k.code == c and _own_doc(k)]
        rows.append((f"`{c}`", code(name), "<br>".join(raised) or "success"))
    lines += _table(("code", "name", "raised as"), rows)
    return "\n".join(lines)


PAGES = {"reference/commands.md": commands_page, "reference/config.md": config_page,
         "reference/telemetry.md": telemetry_page, "reference/metrics.md": metrics_page,
         "reference/exit-codes.md": exit_codes_page}


def write_pages(docs: Path = MENS.parent / "docs") -> list[Path]:
    """Each page into docs/, atomically (temp + rename); returns the paths written."""
    from mens.run.rundir import atomic_write
    return [atomic_write(docs / name, page()) for name, page in PAGES.items()]


if __name__ == "__main__":
    for p in write_pages():
        print(f"wrote {p.relative_to(MENS.parent)}")
