"""Teacher routing tiers: an ordered cascade of endpoints, the `teacher=` config group.

    from mens.synth.teacher import Teacher
    teacher = Teacher.from_config(cfg.teacher)          # conf/teacher/<tier>.yaml
    reply = teacher.ask("mens_samples", messages)       # → client.Reply (checked, counted)
    replies = teacher.ask_many([("mens_subtopics", m1), ("mens_samples", m2)],
                               on_reply=lambda i, r: ...)   # in order; teacher.concurrency at once
    teacher.ledger.write(out / "teacher_stats.json")    # per-teacher counts, tokens, cost

Tiers (conf/teacher/): free, efficient, balanced, genius, auto (the default), local, and
`endpoint` — `teacher=endpoint teacher.base_url=URL teacher.model=NAME teacher.api_key_env=VAR`,
one endpoint that is tried with response_format first. A user's own conf/teacher/NAME.yaml
(`tier: custom`, `candidates: [...]`) works the same way. `teacher.prefer_local=true` puts
conf/teacher/local.yaml's candidates (Ollama, mens serve) first.

Every call goes to the first candidate that has not failed. When one fails — connection
refused, 401/403, 404 (no such model), another 4xx, its key's variable unset, or 429/5xx/timeouts
past teacher.max_retries (client.TeacherUnavailable) — the fall-through is recorded in the ledger
and said (`mens: note:`), and the call goes to the next; the failed one is not asked again in
this run. Bad OUTPUT is not a failure: it is counted and returned (client.Reply). Only when every
candidate has failed does a call raise mens.errors.ConfigError (exit 2): one paragraph naming
each endpoint and why it failed — never a key, which is read from os.environ[api_key_env] only.
"""
from __future__ import annotations

import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable, Iterable

from omegaconf import DictConfig, OmegaConf

from mens.config.schema import TEACHER_CAPABILITIES, TeacherConfig
from mens.errors import ConfigError
from mens.synth.teacher.client import Endpoint, Reply, Settings, TeacherClient, TeacherUnavailable
from mens.synth.teacher.stats import Ledger

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENDPOINT_FIX = ("`teacher=endpoint teacher.base_url=URL teacher.model=NAME "
                "teacher.api_key_env=VAR`")


class Teacher:
    """A cascade of TeacherClients sharing one Ledger; thread-safe."""

    def __init__(self, endpoints: list[Endpoint], settings: Settings, concurrency: int = 4,
                 tier: str = "custom", ledger: Ledger | None = None):
        if not endpoints:
            raise ConfigError(f"teacher={tier} has no candidates: list some under `candidates:` "
                              f"in conf/teacher/{tier}.yaml, or name one endpoint with "
                              f"{ENDPOINT_FIX}.", key="teacher.candidates")
        self.tier, self.concurrency = tier, concurrency
        self.ledger = ledger if ledger is not None else Ledger()
        self.clients = [TeacherClient(e, settings, self.ledger) for e in endpoints]
        self._current = 0
        self._failures: dict[int, str] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, teacher: DictConfig | dict, ledger: Ledger | None = None) -> "Teacher":
        """From the composed `cfg.teacher`, or a dict of its keys (the schema's defaults fill
        the rest: `{"tier": "endpoint", "base_url": URL, "model": NAME}` is enough)."""
        if not isinstance(teacher, DictConfig):
            teacher = OmegaConf.merge(OmegaConf.structured(TeacherConfig), teacher)
        settings = Settings(max_retries=teacher.max_retries, backoff_s=teacher.backoff_s,
                            timeout_s=teacher.timeout_s, temperature=teacher.temperature,
                            max_tokens=teacher.max_tokens)
        return cls(endpoints(teacher), settings, teacher.concurrency, teacher.tier, ledger)

    @property
    def endpoints(self) -> list[Endpoint]:
        return [c.endpoint for c in self.clients]

    # --- calls ------------------------------------------------------------------------------
    def ask(self, name: str, messages: list[dict], **params) -> Reply:
        """Ask the first live candidate; fall through on failure (see the module docstring)."""
        with self._lock:
            i = self._current
        while i < len(self.clients):
            try:
                return self.clients[i].ask(name, messages, **params)
            except TeacherUnavailable as e:
                i = self._failed(i, e.reason)
        raise self.exhausted()

    def ask_many(self, requests: Iterable, on_reply: Callable[[int, Reply], None] | None = None
                 ) -> list[Reply]:
        """Many calls, `concurrency` at a time. Each request is (name, messages) or
        (name, messages, params). Replies come back in request order; `on_reply(index, reply)`
        is called in this thread as each one finishes (to save work as it lands). A cascade
        exhausted mid-batch raises its ConfigError after the calls in flight end."""
        requests = list(requests)
        replies: list[Reply | None] = [None] * len(requests)
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            futures = {pool.submit(self.ask, r[0], r[1], **(r[2] if len(r) > 2 else {})): i
                       for i, r in enumerate(requests)}
            try:
                for f in as_completed(futures):
                    i = futures[f]
                    replies[i] = f.result()
                    if on_reply is not None:
                        on_reply(i, replies[i])
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
        return replies

    # --- the cascade ------------------------------------------------------------------------
    def _failed(self, i: int, reason: str) -> int:
        """Record candidate i's failure (once, whichever thread saw it first); → the next."""
        with self._lock:
            if i >= self._current:
                self._failures[i] = reason
                self._current = i + 1
                nxt = self.clients[i + 1].endpoint.name if i + 1 < len(self.clients) else None
                name = self.clients[i].endpoint.name
                self.ledger.fell_through(name, nxt, reason)
                then = f"trying {nxt}" if nxt else "no candidate is left"
                print(f"mens: note: teacher {name} failed ({reason}); {then}", file=sys.stderr)
            return self._current

    def exhausted(self) -> ConfigError:
        parts = [f"{c.endpoint.name} ({c.endpoint.base_url}, model {c.endpoint.model}): "
                 f"{self._failures.get(i, 'not tried')}" for i, c in enumerate(self.clients)]
        return ConfigError(
            f"No teacher could answer (teacher={self.tier}, {len(parts)} candidate"
            f"{'s' if len(parts) > 1 else ''} tried in order): {'; '.join(parts)}. Fix one of "
            f"them (start the server, set the key's environment variable, correct the model "
            f"name), choose another tier (`teacher=free`, `teacher=local`, ...) or name one "
            f"endpoint with {ENDPOINT_FIX}.", key="teacher")


def endpoints(teacher: DictConfig) -> list[Endpoint]:
    """The cascade a `teacher` config describes, checked (ConfigError naming the key)."""
    if teacher.tier == "endpoint":
        for key in ("base_url", "model"):
            if OmegaConf.is_missing(teacher, key) or teacher[key] in (None, ""):
                raise ConfigError(f"teacher=endpoint needs `teacher.{key}`: {ENDPOINT_FIX} "
                                  f"(api_key_env may stay null for a server without keys).",
                                  key=f"teacher.{key}")
        out = [Endpoint(name="endpoint", base_url=teacher.base_url, model=teacher.model,
                        api_key_env=_env_name(teacher.api_key_env, "teacher.api_key_env"),
                        capabilities=("json_schema",))]   # tried; a 400 naming it falls back
    else:
        for key in ("base_url", "model", "api_key_env"):
            if not OmegaConf.is_missing(teacher, key) and teacher[key] is not None:
                raise ConfigError(f"`teacher.{key}` is read only with `teacher=endpoint` (this "
                                  f"is teacher={teacher.tier}): {ENDPOINT_FIX}.",
                                  key=f"teacher.{key}")
        out = _candidates(teacher.candidates, "teacher.candidates")
    if teacher.prefer_local and teacher.tier != "local":
        local = _local_candidates()             # moved to the front, never asked twice
        out = local + [e for e in out if e.name not in {e.name for e in local}]
    return out


def _candidates(items, where: str) -> list[Endpoint]:
    out, seen = [], set()
    for i, candidate in enumerate(items):
        key = f"{where}[{i}]"
        unknown = set(candidate.capabilities) - set(TEACHER_CAPABILITIES)
        if unknown:
            raise ConfigError(f"`{key}.capabilities` has {sorted(unknown)}: the capabilities "
                              f"mens knows are {list(TEACHER_CAPABILITIES)}.",
                              key=f"{key}.capabilities")
        if candidate.name in seen:
            raise ConfigError(f"`{key}.name={candidate.name}` repeats an earlier candidate's "
                              f"name: each needs its own (the ledger counts by name).",
                              key=f"{key}.name")
        seen.add(candidate.name)
        out.append(Endpoint(
            name=candidate.name, base_url=candidate.base_url, model=candidate.model,
            api_key_env=_env_name(candidate.api_key_env, f"{key}.api_key_env"),
            price_in_per_mtok=candidate.price_in_per_mtok,
            price_out_per_mtok=candidate.price_out_per_mtok,
            price_date=candidate.price_date, price_source=candidate.price_source,
            capabilities=tuple(candidate.capabilities)))
    return out


def _local_candidates() -> list[Endpoint]:
    """conf/teacher/local.yaml's candidates (teacher.prefer_local=true)."""
    import yaml

    from mens.resources import option_path

    raw = yaml.safe_load(option_path("teacher", "local").read_text())
    local = OmegaConf.merge(OmegaConf.structured(TeacherConfig), raw)   # the schema's defaults
    return _candidates(local.candidates, "conf/teacher/local.yaml candidates")


def _env_name(value, key: str) -> str | None:
    """api_key_env must be a variable's NAME. A value that is not one is never echoed: it may
    be a key pasted into the config by mistake."""
    if value is None or ENV_NAME.fullmatch(str(value)):
        return value
    raise ConfigError(f"`{key}` must be the NAME of an environment variable (e.g. "
                      f"OPENAI_API_KEY), and this value is not one — if it is a key, remove it "
                      f"from the config and the command line, and put the key in the "
                      f"environment instead: `export OPENAI_API_KEY=...`, "
                      f"`{key.split('[')[0]}=OPENAI_API_KEY`.", key=key)
