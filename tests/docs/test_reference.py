"""The docs site (issue #42): its reference pages are generated from the code (tools/docs) and
the site builds with `mkdocs build --strict` — so a config key the reference lacks, a command
it does not list, a broken link or a missing page fails `make test`, not a reader.

The keys are found here by walking the schema's dataclasses on their own (not through the
generator), and each must have its row in the config reference.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import typing
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))   # tools/ is the checkout's, not a package mens ships

from tools.docs import reference  # noqa: E402
from tools.docs.comments import field_comments, inherited_comments  # noqa: E402
from mens.cli import COMMANDS  # noqa: E402
from mens.config.schema import MensConfig  # noqa: E402

MKDOCS_ENV = {**os.environ, "DISABLE_MKDOCS_2_WARNING": "true", "NO_MKDOCS_2_WARNING": "1"}


def schema_keys(cls, prefix: str = "") -> list[str]:
    """Every key under a config dataclass: a field's dataclass type (X, Optional[X]) nests its
    keys under `key.`, a list of them (List[X]) under `key[].`."""
    out = []
    for f in dataclasses.fields(cls):
        tp = typing.get_type_hints(cls)[f.name]
        out.append(prefix + f.name)
        for inner in [tp, *typing.get_args(tp)]:
            if dataclasses.is_dataclass(inner):
                is_list = typing.get_origin(tp) is list
                out += schema_keys(inner, f"{prefix}{f.name}{'[].' if is_list else '.'}")
    return out


def missing_keys(page: str, cls) -> list[str]:
    """Keys with neither a row nor (a top-level section) a heading of their own."""
    return [k for k in schema_keys(cls) if f"| `{k}` |" not in page and f"\n## {k}\n" not in page]


def test_every_config_key_has_its_row_in_the_config_reference():
    page = reference.config_page()
    keys = schema_keys(MensConfig)
    assert len(keys) > 300 and "lane.grpo.beta" in keys and "spoke.sources[].weight" in keys
    assert not missing_keys(page, MensConfig), missing_keys(page, MensConfig)
    # a row carries the key's type, default and the comment written beside it in the schema
    assert ("| `train.max_steps` | `int` | `-1` | -1: run the curriculum's epochs |"
            in page.splitlines())
    # a comment continued on the next line is one sentence (GrpoConfig.beta)
    assert "TRL 1.x defaults to 0, DeepSeekMath's GRPO used 0.04" in page


@dataclasses.dataclass
class _Inner:
    a: int = 1      # the a


@dataclasses.dataclass
class _Root:
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    many: typing.List[_Inner] = dataclasses.field(default_factory=list)
    b: str = "x # not a comment"   # b's comment
    # the block above c
    c: typing.Optional[float] = None   # c beside,
    #                                    continued


def test_the_key_check_can_fail():
    page = "\n".join(f"| `{k}` |" for k in ["inner", "inner.a", "many", "b", "c"])
    assert missing_keys(page, _Root) == ["many[].a"]


def test_comments_are_read_from_the_class_that_declares_them():
    assert field_comments(_Root) == {"inner": "", "many": "", "b": "b's comment",
                                     "c": "the block above c — c beside, continued"}
    keys = {k.key: k for k in reference.config_keys(_Root)}
    assert list(keys) == ["inner", "inner.a", "many", "many[].a", "b", "c"]
    assert (keys["inner.a"].comment, keys["inner.a"].default) == ("the a", "1")
    assert keys["b"].default == "x # not a comment" and keys["many"].section


def test_every_command_is_in_the_commands_reference():
    page = reference.commands_page()
    for name in COMMANDS:
        assert f"## {name}\n" in page and f"mens {name} [overrides]" in page, name
    assert "python -m mens.plan [overrides]" in page and "python -m mens [overrides]" in page


def test_the_telemetry_and_metric_references_name_every_event_and_logged_metric():
    from mens.run import telemetry as t

    page = reference.telemetry_page()
    for event in t.Event:
        assert f"## {event.value}\n" in page
        for name in t.ROWS[event].__annotations__:
            assert f"| `{name}` |" in page.split(f"## {event.value}\n")[1], (event, name)
    assert inherited_comments(t.TrainStart)["launch"].startswith("the launcher")
    metrics = reference.metrics_page()
    for name in reference._constant("mens.train.trainer", "METRICS").values():
        assert f"| `{name}` |" in metrics
    assert "<spoke>/pass@1" in metrics and "judge/win_rate" in metrics


def test_the_generator_imports_no_torch():
    code = ("import sys; from tools.docs.reference import PAGES; [f() for f in PAGES.values()]; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_the_committed_reference_pages_are_what_the_code_generates(tmp_path):
    """docs/reference/ is committed (the README links it, and GitHub shows no built site): a
    schema key, command or event changed without `python -m tools.docs.reference` fails here."""
    stale = [name for name, page in reference.PAGES.items()
             if not (ROOT / "docs" / name).is_file()
             or (ROOT / "docs" / name).read_text() != page()]
    assert not stale, f"{stale} drifted from the code: run `python -m tools.docs.reference`"
    written = reference.write_pages(tmp_path)          # the writer writes what the pages return
    assert [p.read_text() for p in written] == [f() for f in reference.PAGES.values()]
    assert sorted(p.name for p in (tmp_path / "reference").iterdir()) == sorted(
        Path(n).name for n in reference.PAGES)           # and no temp left beside them


def test_readme_links_resolve_in_the_checkout():
    """Every relative link in README.md names a file in the checkout (as GitHub resolves it)."""
    import re
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    assert len(links) >= 10, links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(config), "--site-dir", str(site)],
                          cwd=ROOT, env=MKDOCS_ENV, capture_output=True, text=True, timeout=120)


def test_the_site_builds_strict(tmp_path):
    done = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    config = (tmp_path / "site/reference/config/index.html").read_text()
    assert "lane.grpo.beta" in config
    for page in ("commands", "telemetry", "metrics", "exit-codes"):
        assert (tmp_path / f"site/reference/{page}/index.html").is_file()


def test_a_broken_link_fails_the_build(tmp_path):
    docs = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(ROOT / "docs"), str(docs)], check=True)
    (docs / "index.md").write_text((docs / "index.md").read_text()
                                   + "\nSee [the missing page](no-such-page.md).\n")
    cfg = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    cfg["docs_dir"] = str(docs)
    cfg["plugins"][1]["gen-files"]["scripts"] = [str(ROOT / "tools/docs/gen_pages.py")]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(cfg))
    done = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0 and "no-such-page.md" in done.stdout + done.stderr
