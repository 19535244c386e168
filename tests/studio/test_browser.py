"""The studio in a real browser (Debian's Chromium through Playwright): the page opens, the
ladder shows the tiny rung's cells, and in Recipe a different seq_len re-plans to a different
predicted peak and the lane's method × objective plans to that lane (or shows the planner's
refusal). Screenshots are kept under the test's tmp dir (screens/)."""
from __future__ import annotations

import pytest


def test_open_ladder_and_recipe_replans(studio, browser, tmp_path):
    url, _ = studio
    shots = tmp_path / "screens"
    page = browser.new_page(viewport={"width": 1366, "height": 800})   # a laptop screen
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    cell = page.locator('td[data-cell="tiny/vox_lang"] .badge')
    cell.wait_for(timeout=60_000)
    assert cell.inner_text() in ("TRAIN_NOT_RUN", "BASE_SNAPSHOT_ABSENT")
    assert page.locator('td[data-cell^="tiny/"]').count() >= 8   # every spoke of the tiny rung
    page.screenshot(path=str(shots / "topology.png"))

    page.keyboard.press("ArrowRight")     # keyboard: the focused tab moves to Recipe
    page.locator("#recipe").wait_for(state="visible")
    peak = page.locator("#plan-peak")
    page.fill("#r-seq_len", "128")
    page.wait_for_function("document.querySelector('#plan-command').textContent"
                           ".includes('train.seq_len=128')")
    page.wait_for_function("document.querySelector('#plan-peak').textContent.includes('GiB')")
    page.wait_for_timeout(600)
    small = peak.inner_text()
    page.fill("#r-seq_len", "1024")
    page.wait_for_function(f"document.querySelector('#plan-peak').textContent !== '{small}'",
                           timeout=20_000)
    big = peak.inner_text()
    assert float(big.split()[0]) > float(small.split()[0]), (small, big)
    assert page.locator("#plan-verdict").inner_text() == "fits"
    assert page.get_by_role("cell", name="activations", exact=True).count() == 1
    # difficulty caps per epoch: one number per epoch, planned as curriculum.caps
    page.select_option("#r-curriculum", "three_epoch")
    page.fill("#r-caps", "3, 6, 10")
    page.wait_for_function("document.querySelector('#plan-command').textContent"
                           ".includes('curriculum.caps=[3,6,10]')")
    assert "curriculum=three_epoch" in page.locator("#plan-command").inner_text()
    page.wait_for_function("document.querySelector('#plan-verdict').textContent === 'fits'")
    page.screenshot(path=str(shots / "recipe.png"))
    # the lane as method × objective (both selects from /api/options): qlora × dpo on the spoke
    # with preference pairs plans to lane.method=qlora lane.objective=dpo
    from mens.config.schema import OBJECTIVES
    assert page.locator("#r-objective option").all_inner_texts() and \
        page.locator("#r-objective option").count() == len(OBJECTIVES)   # every one, distill too
    page.select_option("#r-spoke", "skill_creation")
    page.select_option("#r-method", "qlora")
    page.select_option("#r-objective", "dpo")
    assert "preference pairs" in page.locator("#r-objective-hint").inner_text()
    page.wait_for_function("document.querySelector('#plan-shape').textContent"
                           ".includes('lane qlora-dpo (qlora × dpo)')", timeout=20_000)
    assert "lane=dpo lane.method=qlora" in page.locator("#plan-command").inner_text()
    # a spoke without pairs: the planner's paragraph, not a stale plan
    page.select_option("#r-spoke", "vox_lang")
    page.locator("#recipe-msg", has_text="vox_lang ships none").wait_for(timeout=20_000)
    assert page.locator("#plan-verdict").inner_text() == "error"
    assert page.locator("#plan-peak").inner_text() == "–"
    page.screenshot(path=str(shots / "recipe-dpo-refused.png"))
    # a recipe's `lane=full` typed as an override moves into the selects (full × sft)
    page.fill("#r-extra", "lane=full train.eval_every=5")
    page.press("#r-extra", "Tab")
    page.wait_for_function("document.querySelector('#plan-verdict').textContent === 'fits'",
                           timeout=20_000)
    assert (page.input_value("#r-method"), page.input_value("#r-objective")) == ("full", "sft")
    assert page.input_value("#r-extra") == "train.eval_every=5"
    assert "lane=full" in page.locator("#plan-command").inner_text()
    assert "lane full (full × sft)" in page.locator("#plan-shape").inner_text()
    assert not errors, errors


def test_compute_hub_and_data_tree_from_the_page(studio, browser, tmp_path):
    import json

    from mens.synth.tree import Node, Tree

    url, _ = studio
    d = tmp_path / "datasets" / "mine"    # the studio runs in tmp_path: studio.datasets=datasets
    tree = Tree("vox_lang", Node(id="root", label="vox_lang"), d / "tree.yaml")
    tree.add_child(tree.root, "loops")
    tree.add_child(tree.root, "strings")
    tree.save()
    (d / "records.jsonl").write_text(json.dumps(
        {"id": "r1", "topic": ["loops"], "verdict": "passed", "tags": [],
         "messages": [{"role": "user", "content": "count"},
                      {"role": "assistant", "content": "1 2 3"}]}) + "\n")
    page = browser.new_page(viewport={"width": 1366, "height": 800})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.locator('button[aria-label="compute for tiny/vox_lang"]').click(timeout=60_000)
    page.wait_for_function("document.querySelector('#compute-local').textContent.includes('fits')",
                           timeout=30_000)
    assert page.locator("#compute-offers tr").count() >= 2           # a header and offers
    assert "mens cloud estimate +rung=tiny" in page.locator("#compute-msg").inner_text()
    page.screenshot(path=str(tmp_path / "screens" / "compute.png"))

    page.click("#tab-data")
    page.locator('li[data-node="strings"]').wait_for(timeout=20_000)
    page.once("dialog", lambda dlg: dlg.accept())
    page.click('button[aria-label="prune strings"]')
    page.locator('li[data-node="strings"]').wait_for(state="detached", timeout=30_000)
    page.click('button[aria-label="expand loops"]')                  # no teacher: the command
    page.locator("#tree-msg", has_text="mens data tree expand").wait_for(timeout=20_000)
    page.fill('input[aria-label="tag for r1"]', "gold")
    page.press('input[aria-label="tag for r1"]', "Enter")
    page.locator('tr[data-record="r1"] .tag', has_text="gold").wait_for(timeout=20_000)
    page.screenshot(path=str(tmp_path / "screens" / "data.png"))
    assert not errors, errors


def test_evals_tab_draws_bars_with_their_intervals(studio, browser, tmp_path):
    """A fixture eval.json (mens.eval.stats' real intervals) and gate.json in a run dir: the
    Evals tab draws one uPlot per metric with a bar per model, each bar's top on the canvas at its
    value, and each error bar spans exactly the row's interval on that bar's own scale (the
    whisker rows as chart.js's draw hook drew them; tests/studio/test_charts.py: their ink)."""
    from eval_util import fake_adapter, rows_a, write_eval, write_gate

    url, runs = studio
    run = runs / "2026-12-01" / "10-00-00_train"
    run.mkdir(parents=True)
    (run / "telemetry.jsonl").write_text("")
    fake_adapter(run)
    rows = rows_a()
    write_eval(run, rows)
    write_gate(run, rows[0])
    page = browser.new_page(viewport={"width": 1366, "height": 800})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url + "#evals")
    art = page.locator('article[data-run="2026-12-01/10-00-00_train"]')
    art.locator(".eval-panel .uplot").first.wait_for(timeout=30_000)
    assert art.locator(".eval-panel").count() == len(rows)       # one uPlot per metric
    # per metric, each whisker as chart.js drew it (plot.errorBars: CSS px in the plot area),
    # and the bar's colour read off the canvas just below and just above its value's row
    drawn = page.evaluate("""run => EvalChart.plots.filter(u => u.root.closest(
        `article[data-run="${run}"]`)).map(u => ({metric: u.root.closest('.eval-panel')
        .dataset.metric, bars: u.errorBars.map(b => { const px = (dy) => [...u.ctx.getImageData(
          Math.round(b.canvas.x + 10 * uPlot.pxRatio), Math.round(u.valToPos(b.value, 'y', true)
          + dy * uPlot.pxRatio), 1, 1).data.slice(0, 3)]; return {...b, inside: px(3),
          above: px(-3)}; })}))""", "2026-12-01/10-00-00_train")
    colours = {"base": [0x9a, 0xa5, 0xb1], "tuned": [0x25, 0x53, 0xb8]}   # chart.js's
    assert [d["metric"] for d in drawn] == [r["name"] for r in rows]
    for d, row in zip(drawn, rows):
        assert [b["model"] for b in d["bars"]] == ["base", "tuned"]
        for b in d["bars"]:
            s = row[b["model"]]
            assert b["inside"] == colours[b["model"]] and b["above"] != b["inside"], b
            scale = (b["y0"] - b["yValue"]) / s["value"]        # px per unit; y0: the 0 line
            assert b["y0"] - b["yValue"] > 10
            assert b["y0"] - b["yHi"] == pytest.approx(s["ci"][1] * scale, abs=0.05)
            assert b["y0"] - b["yLo"] == pytest.approx(s["ci"][0] * scale, abs=0.05)
    # the table and the gate badge say the same numbers as text
    gain = rows[0]["gain"]
    assert art.locator(f'tr[data-metric="{rows[0]["name"]}"] td.gain').inner_text() == (
        f"{100 * gain['value']:+.1f} [{100 * gain['ci'][0]:+.1f}, {100 * gain['ci'][1]:+.1f}] pts")
    assert art.locator(".badge.gate").inner_text() == "pass"
    assert art.locator(".gate-badge").inner_text().strip().startswith("pass@1 gain +40.0 [")
    page.screenshot(path=str(tmp_path / "screens" / "evals.png"), full_page=True)
    assert not errors, errors
