"""A real studio (`python -m mens.studio studio.port=0`) in a child process, and Chromium."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture()
def browser():
    if not CHROMIUM.is_file():
        if os.environ.get("MENS_REQUIRE_BROWSER") == "1":
            pytest.fail("MENS_REQUIRE_BROWSER=1 but /usr/bin/chromium is absent "
                        "(apt-get install -y chromium)")
        pytest.skip("no /usr/bin/chromium: `apt-get install -y chromium` runs the studio's "
                    "browser tests (never `playwright install`)")
    sync_api = pytest.importorskip("playwright.sync_api") \
        if os.environ.get("MENS_REQUIRE_BROWSER") != "1" else __import__(
            "playwright.sync_api", fromlist=["sync_playwright"])
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture()
def studio(tmp_path):
    """(url, runs dir) of a studio started in tmp_path; stopped (SIGINT, by its pid) after."""
    runs = tmp_path / "runs"
    # the gates it launches: the default rules on 6 prompts, 16-token answers, no other spokes,
    # judged from 6 items (eval.min_items: the least n at which the exact test can pass a gain
    # at 95 %; the default gate takes ~7 min on this CPU; tests/gate runs it)
    proc = subprocess.Popen([sys.executable, "-m", "mens.studio", "studio.port=0",
                             f"studio.runs={runs}", "+hw=cpu", "gate.max_prompts=6", "gate.k=1",
                             "gate.max_new_tokens=16", "gate.collateral=false",
                             "eval.min_items=6"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url, seen, t0 = None, [], time.time()
    while time.time() - t0 < 60 and url is None:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        m = re.search(r"studio on (http://\S+/)", line)
        url = m.group(1) if m else None
    if url is None:
        proc.kill()
        pytest.fail("the studio did not start:\n" + "".join(seen))
    yield url, runs
    proc.send_signal(2)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
