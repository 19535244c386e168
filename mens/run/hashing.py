"""Content hashing: one digest for a file's bytes, used wherever mens names something by content
(data locks, gate receipts, the ladder's staleness, export lineage)."""
from __future__ import annotations

import hashlib
from pathlib import Path


def sha256(path: Path | str) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
