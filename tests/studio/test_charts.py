"""The studio's charts (uPlot, shipped in the wheel under static/vendor/) in a real browser, with
the page's network held to the studio itself: a run's telemetry draws with an x axis and one y axis
per unit, tick labels on each (read from the plot, and as ink on the canvas where each `.u-axis`
sits), the units in the axis labels and the legend; drag-to-zoom narrows the x scale and a
double-click restores it; the run's eval draws each value's interval as an error bar (ink on the
canvas at each cap), zoomable in y. Any request for a host other than 127.0.0.1 is aborted and fails the test.
Screenshots: screens/ under the test's tmp dir."""
from __future__ import annotations

import base64
import json
from urllib.parse import urlparse

import pytest

from mens.run.telemetry import Event

RUN = "2026-12-01/09-00-00_train"
# non-white pixels (any channel under 200) inside each .u-axis box of a uPlot: its tick labels
# and axis label are drawn on the canvas, so ink there is the axis rendered
AXIS_INK = """root => { const c = root.querySelector('canvas'), r = c.getBoundingClientRect(),
  k = c.width / r.width, ctx = c.getContext('2d');
  return [...root.querySelectorAll('.u-axis')].map(a => { const b = a.getBoundingClientRect();
    const x = Math.max(0, Math.round((b.left - r.left) * k)), y = Math.max(0, Math.round((b.top - r.top) * k));
    const w = Math.min(c.width - x, Math.round(b.width * k)), h = Math.min(c.height - y, Math.round(b.height * k));
    if (w <= 0 || h <= 0) return 0;
    const d = ctx.getImageData(x, y, w, h).data; let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && Math.min(d[i], d[i + 1], d[i + 2]) < 200) n++;
    return n; }); }"""
# per error bar: the darkest pixel around its top cap and along its whisker above the value
BAR_INK = """() => EvalChart.plots.filter(u => document.contains(u.root)).map(u => ({
  metric: u.root.closest('.eval-panel').dataset.metric, drawn: +u.root.dataset.errorBars,
  label: u.axes[1].label,
  bars: u.errorBars.map(b => { const ctx = u.ctx, dark = (x, y) => { const d = ctx.getImageData(
      Math.round(x) - 2, Math.round(y) - 2, 5, 5).data; let m = 765;
      for (let i = 0; i < d.length; i += 4) m = Math.min(m, d[i] + d[i + 1] + d[i + 2]); return m; };
    const c = b.canvas, top = u.valToPos(b.value, 'y', true);
    return {...b, cap: dark(c.x + 4 * uPlot.pxRatio, c.yHi), whisker: dark(c.x, (c.yHi + top) / 2)}; })}))"""

# a saved screenshot decoded by the browser itself (a data: URL, no request): its size, its
# pixels darker than the page's near-white, and how many distinct colours it holds
PNG_STATS = """async b64 => { const img = new Image(); img.src = 'data:image/png;base64,' + b64;
  await img.decode(); const c = document.createElement('canvas');
  c.width = img.naturalWidth; c.height = img.naturalHeight; const ctx = c.getContext('2d');
  ctx.drawImage(img, 0, 0); const d = ctx.getImageData(0, 0, c.width, c.height).data;
  let dark = 0; const colours = new Set();
  for (let i = 0; i < d.length; i += 4) { if (d[i] + d[i + 1] + d[i + 2] < 450) dark++;
    colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]); }
  return { w: c.width, h: c.height, dark, colours: colours.size }; }"""


def write_telemetry(run, steps: int = 30) -> None:
    t = 1_764_000_000.0
    rows = [{"event": Event.TRAIN_STEP, "time": t + 2 * s, "step": s, "epoch": 0,
             "loss": 2.5 * 0.93 ** s, "tokens_per_sec": 900 + 10 * s, "window_peak_mb": 1500 + s,
             "planned_peak_mb": 1800.0, "planned_steps_total": steps} for s in range(1, steps + 1)]
    rows.insert(10, {"event": Event.CHECKPOINT, "time": t + 20, "step": 10})
    rows.append({"event": Event.TRAIN_COMPLETE, "time": t + 2 * steps + 1})
    run.mkdir(parents=True, exist_ok=True)
    (run / "telemetry.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_charts_render_axes_zoom_and_error_bars_offline(studio, browser, tmp_path):
    from eval_util import rows_a, write_eval

    url, runs = studio
    run = runs / RUN
    write_telemetry(run)
    rows = rows_a()
    write_eval(run, rows)
    shots = tmp_path / "screens"
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    errors, asked, foreign = [], [], []
    page.on("pageerror", lambda e: errors.append(str(e)))

    def local_only(route):
        (asked if urlparse(route.request.url).hostname == "127.0.0.1" else foreign).append(
            route.request.url)
        route.continue_() if urlparse(route.request.url).hostname == "127.0.0.1" else route.abort()
    page.route("**/*", local_only)
    assert urlparse(url).hostname == "127.0.0.1", url
    page.goto(url + "#jobs")

    # the telemetry chart: all 30 steps, then the axes
    page.wait_for_function("document.querySelector('#chart-points').textContent === '30'",
                           timeout=30_000)
    page.wait_for_function("Chart.plot && Chart.plot.data[0].length === 30", timeout=10_000)
    chart = page.locator("#chart .uplot")
    axes = page.evaluate("() => Chart.plot.axes.map(a => a.label)")
    assert axes == ["step", "loss", "memory MB"]     # the default channels: loss, memory
    labels = page.evaluate("() => Chart.plot.tickLabels")
    assert len(labels) == 3 and all(len([t for t in ls if t]) >= 2 for ls in labels), labels
    assert all(1 <= float(t.replace(",", "")) <= 30 for t in labels[0] if t), labels[0]
    assert chart.locator(".u-axis").count() == 3
    ink = page.evaluate(AXIS_INK, chart.element_handle())
    assert len(ink) == 3 and min(ink) > 20, ink           # each axis drew its ticks and label
    legend = chart.locator(".u-legend").inner_text()
    for want in ("loss", "window peak MB vs planned peak", "planned peak", "1800"):
        assert want in legend, legend
    page.screenshot(path=str(shots / "telemetry.png"))

    # drag-to-zoom narrows x to the dragged span; a double-click restores every step
    box = page.locator("#chart .u-over").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.25, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=5)
    page.mouse.up()
    zoomed = page.evaluate("() => [Chart.plot.scales.x.min, Chart.plot.scales.x.max, Chart.zoomed]")
    assert 5 < zoomed[0] < zoomed[1] < 20 and zoomed[2], zoomed
    page.mouse.dblclick(box["x"] + box["width"] / 2, y)
    full = page.evaluate("() => [Chart.plot.scales.x.min, Chart.plot.scales.x.max, Chart.zoomed]")
    assert full[0] <= 1 and full[1] >= 30 and not full[2], full
    # another channel and the wall-time x axis: the chart is rebuilt with their axes
    page.check('[data-ch="tokens_per_sec"]')
    page.select_option("#xaxis", "time")
    page.wait_for_function("Chart.plot && Chart.plot.axes[0].label === 'wall time (s)'")
    assert page.evaluate("() => Chart.plot.axes.map(a => a.label)") == [
        "wall time (s)", "loss", "tokens/s", "memory MB"]
    assert page.evaluate("() => Chart.plot.data[0].at(-1)") == 58   # 29 steps of 2 s after the 1st
    assert chart.locator(".u-axis").count() == 4
    page.screenshot(path=str(shots / "telemetry-time.png"))

    # the eval: one panel per metric, each value's [lo, hi] as a drawn error bar
    page.click("#tab-evals")
    art = page.locator(f'article[data-run="{RUN}"]')
    art.locator(".eval-panel .uplot").first.wait_for(timeout=30_000)
    assert art.locator(".eval-panel").count() == len(rows)
    panels = page.evaluate(BAR_INK)
    assert [p["metric"] for p in panels] == [r["name"] for r in rows]
    for p, row in zip(panels, rows):
        assert p["drawn"] == 2 and p["label"].startswith(p["metric"]), p   # base and tuned
        for b in p["bars"]:
            assert (b["lo"], b["hi"]) == tuple(row[b["model"]]["ci"])
            assert b["cap"] < 250 and b["whisker"] < 250, b   # dark ink (#1b1f24) on the canvas
    first = art.locator(".eval-panel").first
    # zoom in y by dragging down the plot, a double-click back to the whole interval
    y_of = "() => { const y = EvalChart.plots.find(u => document.contains(u.root)).scales.y; " \
           "return [y.min, y.max]; }"
    whole = page.evaluate(y_of)
    box = first.locator(".u-over").bounding_box()
    x = box["x"] + box["width"] / 2
    page.mouse.move(x, box["y"] + box["height"] * 0.2)
    page.mouse.down()
    page.mouse.move(x, box["y"] + box["height"] * 0.6, steps=5)
    page.mouse.up()
    near = page.evaluate(y_of)
    assert whole[0] < near[0] < near[1] < whole[1], (whole, near)
    page.mouse.dblclick(x, box["y"] + box["height"] / 2)
    assert page.evaluate(y_of) == pytest.approx(whole), whole
    assert first.locator(".u-axis").count() == 2
    assert "[" in first.locator(".u-legend").inner_text()   # the legend reads value [lo, hi]
    shot = shots / "evals.png"
    art.screenshot(path=str(shot))
    seen = page.evaluate(PNG_STATS, base64.b64encode(shot.read_bytes()).decode())
    assert seen["w"] > 400 and seen["dark"] > 500 and seen["colours"] > 20, seen   # not blank

    assert not foreign, f"requests left 127.0.0.1: {foreign}"
    assert any(u.endswith("/static/vendor/uplot/uPlot.iife.min.js") for u in asked), asked
    assert not errors, errors
