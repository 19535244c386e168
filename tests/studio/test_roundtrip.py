"""The milestone's round trip, in a real browser: launch a tiny training job from the page and
watch the chart gain points while it runs; a gate that fails is refused promotion by the page
and by /admin/promote (409); after a passing gate the page promotes it; the Serve panel asks the
base and the adapter one held-out prompt and shows two different answers.

The failing gate is `mens gate run=… gate.min_gain=1` (no interval lies above a gain of 1) run by the test itself (a real
gate with a threshold no tiny run meets: cheaper than training a second, harmful adapter); the
passing gate is the page's own `gate` button (`python -m mens.gate run=…`, default thresholds).
Screenshots: screens/ under the test's tmp dir. ~3-4 minutes on 2 CPU cores: slow."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

# the root conftest's FAST_TRAIN, with 10 steps at lr 1e-3 so the adapter clearly moves
KNOBS = {"#r-seq_len": "256", "#r-micro_batch": "4", "#r-max_steps": "10", "#r-lr": "1e-3",
         "#r-extra": "train.global_batch=4 train.eval_max_records=6"}


def wait(cond, timeout, what):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = cond()
        if v:
            return v
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.mark.slow
def test_round_trip_in_the_browser(studio, browser, tmp_path):
    url, runs = studio
    shots = tmp_path / "screens"
    page = browser.new_page(viewport={"width": 1366, "height": 800})
    page.goto(url + "#recipe")
    page.locator("#plan-peak", has_text="GiB").wait_for(timeout=60_000)
    for sel, v in KNOBS.items():
        page.fill(sel, v)
    page.wait_for_function("document.querySelector('#plan-command').textContent"
                           ".includes('train.max_steps=10')")
    page.click("#launch")
    page.locator("#jobs").wait_for(state="visible")
    page.locator("#chart-run", has_text="studio-jobs/").wait_for(timeout=10_000)
    run_id = page.locator("#chart-run").inner_text()
    assert run_id.startswith("studio-jobs/")
    run = runs / run_id
    # the chart gains points while the job runs (server-sent events over telemetry.jsonl)
    points = lambda: int(page.locator("#chart-points").inner_text())   # noqa: E731
    seen = []   # (points on the chart, run finished) sampled while it trains

    def finished():
        seen.append((points(), (run / "summary.json").is_file()))
        return seen[-1][1]
    wait(finished, 400, "the run to finish")
    during = [n for n, done in seen if not done and n > 0]
    assert during and max(during) > min(during), f"no growth seen while running: {seen}"
    wait(lambda: points() >= 10, 30, "all 10 steps on the chart")
    # memory compares like with like: the training window against the planned peak
    assert "window peak MB vs planned peak" in page.locator("#chart-legend").inner_text()
    page.screenshot(path=str(shots / "jobs-finished.png"))

    # a gate that fails (run by the test: see the docstring)
    r = subprocess.run([sys.executable, "-m", "mens.gate", f"run={run}",
                        "gate.min_gain=1", "gate.max_prompts=2", "gate.k=1",
                        "gate.max_new_tokens=8", "gate.collateral=false"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 3, r.stdout + r.stderr

    page.click("#tab-serve")
    page.locator(f'#serve-runs input[value="{run_id}"]').check()
    page.click("#serve-start")
    page.locator("#serve-state", has_text="up").wait_for(timeout=180_000)
    slot = run.name
    page.locator(f'tr[data-slot="{slot}"] button.promote').click()
    page.locator("#serve-msg", has_text="refused (409)").wait_for(timeout=30_000)
    page.screenshot(path=str(shots / "promote-refused.png"))
    serve_url = httpx.get(url + "api/serve").json()["url"]
    direct = httpx.post(serve_url + "/admin/promote", json={"spoke": "vox_lang", "slot": slot})
    assert direct.status_code == 409, direct.text

    # the page's own gate button: the default thresholds (on the studio's own gate.* sizes:
    # see conftest), which this run passes
    page.click("#tab-jobs")
    page.locator(f'tr[data-run="{run_id}"] button', has_text="gate").click()
    wait(lambda: json.loads((run / "gate.json").read_text()).get("verdict") == "pass", 300,
         "a passing gate.json")
    page.click("#tab-serve")
    page.locator(f'tr[data-slot="{slot}"] button.promote').click()
    page.wait_for_function("document.querySelector('#status').textContent"
                           f".includes('champion = {slot}')", timeout=30_000)
    assert page.locator("#serve-msg").inner_text() == ""

    # the round trip: one held-out prompt to base and adapter, side by side
    page.select_option("#chat-a", "base")
    page.select_option("#chat-b", slot)
    assert page.locator("#chat-prompt").input_value().strip()
    page.click("#chat-ask")
    page.locator("#chat-differ", has_text="differ").wait_for(timeout=120_000)
    a, b = page.locator("#answer-a").inner_text(), page.locator("#answer-b").inner_text()
    page.screenshot(path=str(shots / "chat.png"))
    assert page.locator("#chat-differ").inner_text() == "the answers differ", (a, b)
    assert a != b
