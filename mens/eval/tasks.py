"""lm-eval tasks by name, loaded before any model time is spent: unknown names and datasets that
are neither cached nor downloadable fail here, in seconds, as one-paragraph ConfigErrors.

lm-eval's TaskManager indexes its ~15k bundled task YAMLs on construction (~20 s on 2 cores),
so one manager per include_path is kept for the process (base and tuned share it), and a
request naming only tasks of the user's include_path is served by an index of that dir alone.
"""
from __future__ import annotations

import difflib
import functools
from contextlib import contextmanager

from mens.errors import ConfigError

HUB_PROBE_S = 3.0     # one HEAD to the hub endpoint; longer means unusable for a dataset download


@functools.lru_cache(maxsize=4)
def task_manager(include_path: str | None, defaults: bool = True):
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=include_path, include_defaults=defaults)


def hub_reachable() -> bool:
    """Can datasets reach the Hugging Face hub? False under HF_HUB_OFFLINE, or when one HEAD to
    the endpoint (the hub library's own client: its proxies, HF_ENDPOINT) fails in seconds."""
    from huggingface_hub import constants, get_session

    if constants.is_offline_mode():
        return False
    try:
        get_session().head(constants.ENDPOINT, timeout=HUB_PROBE_S)
        return True
    except Exception:   # DNS, refused, timeout, TLS: any of them means no download will work
        return False


@contextmanager
def offline_hub(offline: bool):
    """HF_HUB_OFFLINE semantics for the duration of the task load: `datasets` then answers from
    its cache at once instead of retrying the hub five times with backoff (~25 s a dataset).
    The variable is read once at import, and mens has imported both libraries by now, so their
    flags are set here and restored after (the same two the environment variable would set)."""
    import datasets.config
    from huggingface_hub import constants

    if not offline:
        yield
        return
    saved = constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = saved


def _unknown(name: str, tm) -> ConfigError:
    near = difflib.get_close_matches(name, tm.all_tasks, n=5, cutoff=0.6)
    hint = (f"Near matches: {', '.join(near)}." if near else
            "No near match; `lm_eval ls tasks` lists them all.")
    return ConfigError(f"eval.tasks: `{name}` is not an lm-eval task, group or tag (lm-eval "
                       f"{_version()} with eval.include_path={tm.include_path}). {hint} A task of "
                       f"your own: a YAML in a dir named by `eval.include_path=DIR`.",
                       key="eval.tasks")


def _version() -> str:
    from importlib.metadata import version
    return version("lm_eval")


def _leaves(name: str, tm, seen=None) -> list[dict]:
    """The raw configs of the leaf tasks a name stands for (from the index: nothing loaded)."""
    seen = set() if seen is None else seen
    entry = tm.task_index.get(name)
    if entry is None or name in seen:
        return []
    seen.add(name)
    cfg = entry.cfg or {}
    members = cfg.get("task") if isinstance(cfg.get("task"), list) else None
    if members is None and entry.kind.name == "TAG":
        members = [n for n, e in tm.task_index.items() if name in (e.tags or ())]
    if members is None:
        return [cfg]
    out = []
    for m in members:
        out += _leaves(m, tm, seen) if isinstance(m, str) else [m]
    return out


def _source(name: str, tm) -> str:
    entry = tm.task_index.get(name)
    return str(entry.yaml_path) if entry is not None and entry.yaml_path else "inline"


def _missing_data(name: str, tm, err: Exception, online: bool) -> ConfigError:
    leaves = _leaves(name, tm)
    local = [c for c in leaves if (c.get("dataset_kwargs") or {}).get("data_files")]
    if local and isinstance(err, FileNotFoundError):   # the user's own files, not the hub's
        return ConfigError(
            f"eval.tasks: lm-eval task `{name}` ({_source(name, tm)}) reads data_files that are "
            f"not there ({type(err).__name__}: {str(err)[:200]}). lm-eval hands data_files to "
            f"`datasets` as written, so a relative path is relative to the current directory, "
            f"not to the YAML: write absolute paths in the task YAML.", key="eval.tasks")
    sets = sorted({(c.get("dataset_path"), c.get("dataset_name")) for c in leaves
                   if c.get("dataset_path")}, key=str) or [("?", None)]
    named = "; ".join(f"`{p}`" + (f" (name `{n}`)" if n else "") for p, n in sets[:5])
    p, n = sets[0]
    cmd = f"python -c \"import datasets; datasets.load_dataset('{p}'" + \
          (f", '{n}'" if n else "") + ")\""
    why = ("the Hugging Face hub is not reachable from here (or HF_HUB_OFFLINE is set) and it is "
           "not in the local `datasets` cache" if not online else "it could not be loaded")
    return ConfigError(
        f"eval.tasks: lm-eval task `{name}` needs dataset {named}, but {why} "
        f"({type(err).__name__}: {str(err)[:200]}). On a machine that is online run `{cmd}`, "
        f"then copy its cache (HF_DATASETS_CACHE, default ~/.cache/huggingface/datasets) into "
        f"this machine's; or drop `{name}` from eval.tasks.", key="eval.tasks")


def _closed(names: list[str], tm) -> bool:
    """Every name, and every member name of its groups, is in this index (nothing bundled)."""
    todo, seen = list(names), set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        entry = tm.task_index.get(n)
        if entry is None:
            return False
        members = (entry.cfg or {}).get("task")
        todo += [m for m in members if isinstance(m, str)] if isinstance(members, list) else []
    return True


def load_tasks(names: list[str], include_path: str | None) -> tuple[object, dict]:
    """(the TaskManager, {name: [Task | Group, ...]}): the objects each requested name stands
    for, datasets loaded. ConfigError for an unknown name (with near matches) or for data that
    is neither cached nor downloadable."""
    from datasets.exceptions import DatasetsError

    if not names:
        raise ConfigError("eval.tasks is empty: name lm-eval tasks, e.g. "
                          "`eval.tasks=[arc_easy,hellaswag]`.", key="eval.tasks")
    include = str(include_path) if include_path else None
    tm = task_manager(include, False) if include else None
    if tm is None or not _closed(names, tm):   # bundled tasks wanted: the full (slow) index
        tm = task_manager(include, True)
    for n in names:
        if n not in tm.task_index:
            raise _unknown(n, tm)
    online = hub_reachable()
    if not online:
        print("mens eval: the Hugging Face hub is not reachable: lm-eval task datasets come from "
              "the local `datasets` cache only (HF_HUB_OFFLINE semantics)")
    loaded = {}
    with offline_hub(not online):
        for n in names:
            try:
                got = tm.load([n])
            except (OSError, DatasetsError) as e:   # ConnectionError, not cached, no such repo
                raise _missing_data(n, tm, e, online) from None
            except Exception as e:   # a task YAML lm-eval cannot build: the user's to fix
                raise ConfigError(f"eval.tasks: lm-eval could not build task `{n}` from "
                                  f"{_source(n, tm)}: {type(e).__name__}: {str(e)[:300]}. Fix "
                                  f"that task config (`lm-eval validate --tasks {n}"
                                  + (f" --include_path {include}" if include else "")
                                  + "` checks it).",
                                  key="eval.tasks") from None
            loaded[n] = [got["groups"][n]] if n in got["groups"] else list(got["tasks"].values())
    return tm, loaded
