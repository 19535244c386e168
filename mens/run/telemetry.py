"""The telemetry vocabulary (torch-free): every event name a run writes to telemetry.jsonl, the
fields each event's row carries, and the one reader every stage uses — compare, the ladder, the
studio's live views, `rerun=` and `resume=`, the tests (afk's included) — directly or through
RunDir.telemetry_rows. The writer is mens.train.telemetry.Telemetry.

This is the only module that spells an event name (tests/run/test_vocabulary.py scans mens/ for
others); the studio page gets the names from the server (`/api/telemetry`, `vocabulary()`).

Rows are typed with TypedDicts, not dataclasses or a JSON Schema: a row stays the plain dict it
is on both sides of the file (JSON in, dict out, forwarded to the page untouched), rows of older
runs with fewer or more keys still read, a type checker sees every field by name, and
`__required_keys__` gives the runtime check (`problems`) without a second schema language. A row
may carry more than its TypedDict names (a lane's own step metrics, e.g. `rewards/…`): the
TypedDict is what every reader may count on.
"""
from __future__ import annotations

import json
import os
from enum import StrEnum
from pathlib import Path
from typing import Any, TypedDict


class Event(StrEnum):
    """The events, in the order a run writes them. A StrEnum: a member *is* its name as a str,
    so it compares equal to a row's "event" and json.dumps writes the bare name."""
    TRAIN_START = "TRAIN_START"              # first row: the whole resolved spec (rerun=)
    RESUME = "RESUME"                        # a resume= session begins
    GPU_FALLBACK = "GPU_FALLBACK"            # the plan's precision fallback (also a note prefix)
    DATA = "DATA"                            # what the data pipeline kept and dropped
    PATHS = "PATHS"                          # attention / loss / heap paths this run uses
    NOTE = "NOTE"                            # what loading did other than the spec said
    CURRICULUM = "CURRICULUM"                # one per epoch: its planned records / rows
    TRAIN_STEP = "TRAIN_STEP"                # one per optimizer step
    EVAL = "EVAL"                            # a held-out score (base, training, adapter)
    CHECKPOINT = "CHECKPOINT"                # last.ckpt holds this step
    TRAIN_INTERRUPTED = "TRAIN_INTERRUPTED"  # terminal: checkpointed, exit 130
    TRAIN_FAILED = "TRAIN_FAILED"            # terminal: a MensError during fit
    TRAIN_COMPLETE = "TRAIN_COMPLETE"        # terminal: the summary


# the rows after which no other row of that session comes
TERMINAL = (Event.TRAIN_COMPLETE, Event.TRAIN_FAILED, Event.TRAIN_INTERRUPTED)


# --- the rows ----------------------------------------------------------------------------------
class Row(TypedDict):
    event: str
    time: float                              # unix seconds, when written


class Launch(TypedDict, total=False):
    launch: dict          # the launcher that started the ranks: launcher, id, world_size, nodes,
    #                       per_node (mens.train.launched); absent when mens started them


class TrainStart(Row, Launch):
    spec: dict                               # the resolved run spec (spec.yaml's content)
    plan: dict                               # the plan it was admitted on (plan.json's)
    git: dict                                # commit and dirty of mens's checkout (null: installed)
    versions: dict                           # the packages' versions the run used
    host: dict                               # hostname, platform, python, cpus
    argv: list                               # the command line
    allocator: dict                          # the heap setting in force (train.heap)
    world_size: int                          # processes training (hw.nodes × hw.devices)
    strategy: str                            # single | ddp | fsdp2


class Resume(Row, Launch):
    checkpoint: str                          # the checkpoint the session continues from
    world_size: int                          # must equal the run's first (a resume keeps the world)


class Detail(Row):                           # GPU_FALLBACK, NOTE
    detail: str                              # the note, as printed


class Data(Row, total=False):
    spoke: str                               # the run's spoke
    data: str                                # where the records came from (data.source's label)
    lock: list                               # files read and their sha256 (spec's data_lock)
    unsupervised_records_skipped: int        # + the pipeline's own counts (mens.data)


class Paths(Row):
    attention: str                           # per_record | block_mask | padded
    loss: str
    heap: dict


class Curriculum(Row, total=False):
    epoch: int                               # from 0
    cap: Any                                 # highest difficulty seen (curriculum.caps)
    total: int                               # records this epoch trains on
    per_phase: dict                          # those records per curriculum phase (0s kept)
    rows: int                                # packed: the epoch's rows (mens.data.pack)
    records: int


class TrainStep(Row, total=False):
    epoch: int                               # from 0
    step: int                                # optimizer steps done
    loss: float                              # the objective's loss of the step
    learning_rate: float                     # after the schedule
    grad_norm: float | None                  # total 2-norm of the gradients, before clipping
    tokens_per_sec: float | None             # real tokens of every rank / the step's seconds
    valid_tokens: int                        # supervised tokens (those the loss counts), all ranks
    real_tokens: int                         # tokens that are not padding, all ranks
    padding_pct: float | None                # share of the batch's slots that are padding
    supervised_ratio_pct: float | None       # valid_tokens / real_tokens
    planned_peak_mb: float | None            # the plan's predicted peak of the training window
    window_peak_mb: float | None             # its measured peak so far (mens.train.meter)
    planned_steps_total: int                 # optimizer steps the plan expects
    eta_seconds_remaining: float | None      # steps left / steps_per_sec_ema
    progress_fraction: float | None          # step / planned_steps_total
    steps_per_sec_ema: float | None          # optimizer steps per second, moving average
    # resource readings (mens.train.telemetry.resource_readings): null where a backend has none
    cpu_util_pct: float | None               # the machine's, since the last reading
    sys_ram_used_mb: float | None            # the machine's RAM in use
    peak_mem_mb: float | None                # CUDA: allocator peak; MPS: driver's; CPU: peak RSS
    gpu_util_pct: float | None               # CUDA with NVML only
    gpu_vram_used_mb: float | None           # CUDA: reserved by the allocator; MPS: driver's
    rss_mb: float                            # the process's RSS now (CPU only)
    # a mixture of experts: the router's load-balancing loss, unscaled, the step's micro-batch
    # mean (mens.train.router; `loss` stays the causal-LM loss even where coef·aux is added)
    router_aux_loss: float


class Eval(Row, total=False):
    model: str                               # base | training | adapter
    split: str                               # eval | collateral
    spoke: str
    loss: float
    step: int                                # the validation loop's rows only
    tokens: int
    records: int
    reward_accuracy: float                   # pair sets (dpo)
    reward_margin: float
    loss_at_reference: float | None
    check: str                               # split "oracle" (grpo): greedy answers' oracle
    passed: int
    pass_rate: float
    reward_mean: float


class Checkpoint(Row, total=False):
    step: int                                # the optimizer steps it holds
    epoch: int
    path: str                                # the checkpoint file
    world_size: int                          # the world that wrote it (a resume must match)
    reason: str                              # interrupted | requested (absent: periodic)


class Interrupted(Row):
    exit_code: int                           # 130
    step: int                                # the last optimizer step done
    checkpoint: str                          # where resume= goes on from


class Failed(Row):
    exit_code: int                           # the MensError's (mens.errors)
    step: int                                # the last optimizer step done
    message: str                             # the error's one paragraph
    checkpoint: str | None                   # the last checkpoint, if any


class Complete(Row, total=False):            # summary.json's content (mens.train.run._summary)
    spoke: str
    lane: str                                # its label: lora, lora-dpo … (lane_fields)
    rung: str
    steps: int                               # optimizer steps trained
    eval_loss_base: float                    # held-out loss of the base model
    eval_loss_adapter: float                 # held-out loss after training
    duration_s: float                        # wall seconds of fitting (this session)


ROWS: dict[Event, type] = {
    Event.TRAIN_START: TrainStart, Event.RESUME: Resume, Event.GPU_FALLBACK: Detail,
    Event.DATA: Data, Event.PATHS: Paths, Event.NOTE: Detail, Event.CURRICULUM: Curriculum,
    Event.TRAIN_STEP: TrainStep, Event.EVAL: Eval, Event.CHECKPOINT: Checkpoint,
    Event.TRAIN_INTERRUPTED: Interrupted, Event.TRAIN_FAILED: Failed,
    Event.TRAIN_COMPLETE: Complete,
}
# fields the writer always fills, though the TypedDict leaves them optional for older runs
ALWAYS = {Event.DATA: {"spoke", "data", "lock"},
          Event.CURRICULUM: {"epoch", "cap"},
          Event.TRAIN_STEP: {"epoch", "step", "loss", "learning_rate", "planned_steps_total"},
          Event.EVAL: {"model", "split", "spoke", "loss"},
          Event.CHECKPOINT: {"step", "epoch", "path", "world_size"},
          Event.TRAIN_COMPLETE: {"spoke", "lane", "rung", "steps", "eval_loss_base",
                                 "eval_loss_adapter", "duration_s"}}


def required(event: Event | str) -> frozenset[str]:
    e = Event(event)
    return frozenset(ROWS[e].__required_keys__) | ALWAYS.get(e, set())


def problems(row: dict) -> list[str]:
    """What is wrong with a row as the writer writes it now ([] when nothing)."""
    try:
        event = Event(row.get("event"))
    except ValueError:
        return [f"unknown event {row.get('event')!r}"]
    return [f"{event} row without `{k}`" for k in sorted(required(event) - row.keys())]


def vocabulary() -> dict:
    """What the studio page needs to read a stream: the names, and which ones end a session."""
    return {"events": {e.name: e.value for e in Event}, "terminal": [e.value for e in TERMINAL]}


# --- the reader --------------------------------------------------------------------------------
def _parse(lines: list[bytes], path: Path, strict: bool) -> list[dict]:
    out = []
    for line in lines:
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            # a whole file's corrupt line is a fault to say; a live view goes on past it
            if strict:
                raise ValueError(f"{path}: a telemetry line is not JSON: {line[:120]!r}") from None
    return out


def _complete(data: bytes) -> tuple[list[bytes], bytes]:
    """Whole lines, and the rest: a row still being written (no newline yet) is not a row."""
    *lines, rest = data.split(b"\n")
    return lines, rest


def read(path: Path | str, event: Event | str | None = None, strict: bool = True) -> list[dict]:
    """Every row of a telemetry file (of one event, when given); [] when there is no file.
    strict=False passes over a corrupt line (a writer killed mid-row, then resumed after it)
    instead of raising — for a view that polls a run being killed on purpose."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    rows = _parse(_complete(data)[0], path, strict)
    return rows if event is None else [r for r in rows if r.get("event") == event]


def first(path: Path | str) -> dict | None:
    """The first row alone (TRAIN_START: the resolved spec, the start time) — the file's first
    line, however long the rest is."""
    try:
        with open(path, "rb") as f:
            line = f.readline()
    except FileNotFoundError:
        return None
    rows = _parse([line], Path(path), strict=True) if line.endswith(b"\n") else []
    return rows[0] if rows else None


def last(path: Path | str, nbytes: int = 65536) -> list[dict]:
    """The rows in the last nbytes of the file (its beginning is never read): a live view's
    status of a long run."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - nbytes))
            chunk = f.read()
    except OSError:
        return []
    lines, _ = _complete(chunk)
    if size > nbytes:
        lines = lines[1:]   # the first line is cut
    return _parse(lines, Path(path), strict=False)


class Tail:
    """Follows a telemetry file from an offset: each read() returns the complete rows written
    since the last one (never re-reading the file); `offset` is where the next read starts."""

    def __init__(self, path: Path | str, offset: int = 0):
        self.path, self.offset, self._buf = Path(path), offset, b""

    def read(self, limit: int = 1 << 20) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset + len(self._buf))
                data = f.read(limit)
        except OSError:
            return []
        lines, self._buf = _complete(self._buf + data)
        self.offset += sum(len(line) + 1 for line in lines)
        return _parse(lines, self.path, strict=False)
