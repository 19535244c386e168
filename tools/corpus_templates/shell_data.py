"""Sample data for structured_shell and a check of every jq claim: when jq is installed the
generator runs each filter on its sample and fails loudly if the answer's stated output is not
what jq prints (the stated output itself is computed in Python, so the files do not depend on
whether jq is present)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

# (file stem, id field, id values, category field, categories, number field)
DOMAINS = [
    ("services", "name", ["api", "web", "worker", "cron", "auth", "search", "billing", "mailer"],
     "status", ["up", "down", "degraded"], "latency_ms"),
    ("builds", "job", ["lint", "unit", "e2e", "docs", "package", "deploy", "bench", "fuzz"],
     "result", ["success", "failure", "aborted"], "duration_s"),
    ("orders", "order_id", ["A-101", "A-102", "B-220", "B-221", "C-305", "C-306", "D-410"],
     "state", ["paid", "pending", "refunded"], "total_cents"),
    ("hosts", "hostname", ["db-1", "db-2", "cache-1", "edge-1", "edge-2", "batch-1", "gw-1"],
     "role", ["db", "cache", "edge"], "load_pct"),
    ("packages", "pkg", ["serde", "tokio", "rand", "clap", "regex", "anyhow", "rayon", "log"],
     "license", ["MIT", "Apache-2.0", "BSD-3-Clause"], "size_kb"),
    ("tickets", "key", ["OPS-12", "OPS-19", "DEV-7", "DEV-31", "SEC-4", "SEC-9", "UX-15"],
     "priority", ["low", "high", "urgent"], "age_days"),
    ("accounts", "login", ["mira", "tomas", "ines", "kofi", "lena", "arjun", "sofia", "yuki"],
     "team", ["infra", "data", "mobile"], "logins"),
    ("queues", "queue_id", ["q-alpha", "q-beta", "q-gamma", "q-delta", "q-eps", "q-zeta"],
     "tier", ["bulk", "default", "express"], "depth"),
    ("volumes", "volume", ["vol-a1", "vol-b2", "vol-c3", "vol-d4", "vol-e5", "vol-f6"],
     "class", ["ssd", "hdd", "archive"], "used_gb"),
]
DIRS = ["/var/log/app", "/srv/uploads/tmp", "$HOME/.cache/thumbs", "/data/exports",
        "/opt/ci/artifacts", "/tmp/render-out", "/var/spool/reports", "/mnt/scratch/jobs",
        "./build/logs"]
EXTS = ["log", "tmp", "bak", "part", "gz", "json", "csv", "dmp", "out"]


def rows(c, dom, k=None):
    stem, idf, ids, cat, cats, num = dom
    chosen = c.rng.sample(ids, min(len(ids), k or c.randint(4, 6)))
    return [{idf: i, cat: c.choice(cats), num: c.randint(1, 500)} for i in chosen]


def compact(obj) -> str:
    """jq -c style: no spaces."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def pretty(obj) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False)


def jq_check(args: list[str], data: str, expected: str) -> None:
    """MENS_CORPUS_JQ_CHECK=0 skips it (the fast determinism test does: ~3 s of jq processes
    that cannot change a byte of the output)."""
    jq = shutil.which("jq")
    if not jq or os.environ.get("MENS_CORPUS_JQ_CHECK") == "0":
        return
    got = subprocess.run([jq, *args], input=data, capture_output=True, text=True, timeout=20)
    if got.stdout.rstrip("\n") != expected.rstrip("\n"):
        raise RuntimeError(f"shell template claims jq {args} prints\n{expected}\nbut jq printed\n"
                           f"{got.stdout}{got.stderr}")
