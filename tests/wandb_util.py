"""Reading wandb's offline run files back, as the tests of runs that compare need (issue #17)."""
from __future__ import annotations

from pathlib import Path


def wandb_records(path: Path):
    """The protobuf Records of an offline `.wandb` file. The file is a LevelDB log (a 7-byte
    `:W&B` header, then 32 KiB blocks of [crc32 u32, length u16, type u8, data] chunks; type
    1 = a whole record, 2/3/4 = first/middle/last piece). wandb ≥0.2x reads it only in its Go
    core, so the framing is read here; the records are parsed with wandb's own protobuf."""
    import struct

    from wandb.proto import wandb_internal_pb2

    data, pos, buf = path.read_bytes(), 7, b""
    assert data[:4] == b":W&B", path
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:          # a block's tail too short for a header: padding
            pos += 32768 - pos % 32768
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        buf, pos = buf + data[pos + 7:pos + 7 + n], pos + 7 + n
        if kind in (1, 4) and buf:
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(buf)
            yield rec
            buf = b""


def wandb_groups(run_dir: Path) -> set:
    return {rec.run.run_group for f in run_dir.glob("wandb/offline-run-*/run-*.wandb")
            for rec in wandb_records(f) if rec.WhichOneof("record_type") == "run"}


def wandb_run(job: Path) -> dict:
    """What one job's offline .wandb file holds: the run record, per-step history, the final
    summary keys, artifacts."""
    import json as _json

    out = {"run": None, "history": [], "summary": set(), "artifacts": []}
    for f in job.glob("wandb/offline-run-*/run-*.wandb"):
        for rec in wandb_records(f):
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                out["run"] = rec.run
            elif kind == "history":
                out["history"].append({i.key or "/".join(i.nested_key): _json.loads(i.value_json)
                                       for i in rec.history.item})
            elif kind == "summary":
                out["summary"] |= {i.key for i in rec.summary.update}
            elif kind == "artifact":
                out["artifacts"].append(rec.artifact)
    return out
