"""The studio in a real browser (Debian's Chromium through Playwright): the page opens, the
ladder shows the tiny rung's cells, and in Recipe a different seq_len re-plans to a different
predicted peak. Screenshots are kept under the test's tmp dir (screens/)."""
from __future__ import annotations


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
