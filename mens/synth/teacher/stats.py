"""The teacher ledger: what each teacher was asked, answered and cost, and every fall-through.

One `TeacherStats` per candidate (by its name), shared by every thread of a batch (one lock).
`Ledger.as_dict()` / `Ledger.write(path)` give the JSON a caller keeps beside its dataset
(written atomically, temp + rename):

    {"teachers": {NAME: {"model", "base_url", "calls", "ok", "invalid_json",
                         "schema_violations", "samples_kept", "samples_dropped", "retries",
                         "fallthroughs", "prompt_tokens", "completion_tokens", "cost_usd",
                         "price_in_per_mtok", "price_out_per_mtok", "price_date",
                         "price_source", "mode", "notes"}},
     "fallthroughs": [{"from", "to", "reason", "at"}],
     "totals": {... the sums ..., "cost_usd"}}

`calls`: replies received (a retry after a validation error is a call of its own); `ok`: calls
whose object was usable; `invalid_json` / `schema_violations`: calls whose reply was not JSON /
broke the schema (a mens_samples reply that kept some samples counts in both `ok` and
`schema_violations`); `retries`: requests repeated after a 429 / 5xx / timeout;
`fallthroughs`: times this teacher failed and the next candidate was tried. `cost_usd` is null
when the teacher has no price (said in its `notes`), and the total is null if any used
teacher's is. No key ever enters the ledger: candidates hold the NAME of their key's
environment variable, and reasons are written by mens, not copied from a server's 401.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

COUNTS = ("calls", "ok", "invalid_json", "schema_violations", "samples_kept", "samples_dropped",
          "retries", "fallthroughs", "prompt_tokens", "completion_tokens")


@dataclass
class TeacherStats:
    model: str
    base_url: str
    price_in_per_mtok: float | None = None
    price_out_per_mtok: float | None = None
    price_date: str | None = None
    price_source: str | None = None
    mode: str | None = None          # json_schema | prompt (the schema in the prompt)
    calls: int = 0
    ok: int = 0
    invalid_json: int = 0
    schema_violations: int = 0
    samples_kept: int = 0
    samples_dropped: int = 0
    retries: int = 0
    fallthroughs: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def priced(self) -> bool:
        return self.price_in_per_mtok is not None and self.price_out_per_mtok is not None

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """USD for these tokens at this teacher's price; None without a price."""
        if not self.priced:
            return None
        return (prompt_tokens * self.price_in_per_mtok
                + completion_tokens * self.price_out_per_mtok) / 1e6

    @property
    def cost_usd(self) -> float | None:
        return self.cost(self.prompt_tokens, self.completion_tokens)


class Ledger:
    """Per-teacher counters and the fall-through log; thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self.teachers: dict[str, TeacherStats] = {}
        self.fallthroughs: list[dict] = []

    def register(self, name: str, stats: TeacherStats) -> None:
        with self._lock:
            self.teachers.setdefault(name, stats)

    def add(self, name: str, **counts: int) -> None:
        with self._lock:
            s = self.teachers[name]
            for k, v in counts.items():
                setattr(s, k, getattr(s, k) + v)

    def set_mode(self, name: str, mode: str) -> None:
        with self._lock:
            self.teachers[name].mode = mode

    def note(self, name: str, text: str) -> None:
        with self._lock:
            if text not in self.teachers[name].notes:
                self.teachers[name].notes.append(text)

    def fell_through(self, name: str, to: str | None, reason: str) -> None:
        with self._lock:
            self.teachers[name].fallthroughs += 1
            self.fallthroughs.append({"from": name, "to": to, "reason": reason,
                                      "at": time.strftime("%Y-%m-%dT%H:%M:%S")})

    def as_dict(self) -> dict:
        with self._lock:
            teachers = {}
            for name, s in self.teachers.items():
                d = asdict(s)
                d["cost_usd"] = s.cost_usd
                if not s.priced and s.calls:
                    d["notes"] = [*d["notes"], "no price for this teacher: cost_usd is null"]
                teachers[name] = d
            used = [s for s in self.teachers.values() if s.calls]
            totals = {k: sum(getattr(s, k) for s in self.teachers.values()) for k in COUNTS}
            totals["cost_usd"] = (None if any(not s.priced for s in used)
                                  else sum(s.cost_usd for s in used))
            return {"teachers": teachers, "fallthroughs": list(self.fallthroughs),
                    "totals": totals}

    def write(self, path: Path | str) -> Path:
        """The ledger as JSON at `path`, written atomically (temp + rename)."""
        from mens.run.rundir import atomic_write

        path = Path(path)
        atomic_write(path, json.dumps(self.as_dict(), indent=2) + "\n")
        return path
