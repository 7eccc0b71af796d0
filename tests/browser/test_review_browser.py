"""The review queue in headless Chromium: open a batch output, accept one item, correct another in the Correct tab,
step back and forth with the keyboard, export the reviewed dataset.

The batch is made by the batch code (``dataset_fixtures.review_batch``: a scripted VLM over known rectangles) under a
folder the app is told to review from (``SAM3_AGENT_REVIEW_ROOT``); the app is ``app.py --preset tiny`` as in the other
browser tests. Every step waits for what a person waits for: the bar's text, the Correct tab's status line, a file
written. Screenshots go to test-output/screenshots/review_*.png.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

if not Path("/usr/bin/chromium").exists():
    pytest.skip("Chromium is not installed at /usr/bin/chromium (CI installs it with apt-get)",
                allow_module_level=True)

import browser_app
from browser_app import SHOTS, open_page, running_app, slow_server
from dataset_fixtures import review_batch
from playwright.sync_api import Page, expect

from sam3_agent.datasets.review.exports import EXPORT_FILE


def press(page: Page, key: str) -> None:
    """A review key, typed with the focus on the page (not in a text field)."""
    page.locator("#review-position").click()
    page.keyboard.press(key)


def bar_says(page: Page, text: str) -> None:
    expect(page.locator("#review-position")).to_contain_text(text)


def saved_state(batch: Path, item: str) -> str | None:
    path = batch / "items" / item / "review.json"
    return json.loads(path.read_text())["state"] if path.exists() else None


def test_review_a_batch_by_buttons_and_keys(tmp_path):
    batch = review_batch(tmp_path / "reviews")  # tmp/reviews/out: cup (1 mask), dog (none), flag (1 mask), lost
    with running_app(tmp_path, {"SAM3_AGENT_REVIEW_ROOT": str(batch.parent)}) as url, \
            open_page(url, tmp_path / "chromium-profile") as page:
        page.get_by_role("tab", name="Review a batch").click()
        expect(page.locator("#review-folder input")).to_have_value("out")
        page.click("#review-open-btn")
        bar_says(page, "Item 1 of 3: cup")
        bar_says(page, "0 of 3 reviewed")
        expect(page.locator("#correct-status")).to_contain_text("Corrected answer: 1 mask (the agent chose 1).")
        expect(page.locator("#correct-canvas img.cv-image")).to_be_visible()  # the Correct tab is in front
        page.screenshot(path=str(SHOTS / "review_01_opened.png"), full_page=True)

        page.click("#review-accept")  # the cup, as the agent answered
        bar_says(page, "Item 2 of 3: dog")
        bar_says(page, "1 of 3 reviewed (1 accepted, 0 corrected)")
        assert saved_state(batch, "cup") == "accepted"

        press(page, "n")  # the flag
        bar_says(page, "Item 3 of 3: flag")
        expect(page.locator("#correct-status")).to_contain_text("Corrected answer: 1 mask")
        page.locator("#selected-mask input").click()  # correct it: delete its mask
        page.get_by_role("option", name=re.compile(r"^1: ")).click()
        expect(page.locator("#correct-status")).to_contain_text("Selected: mask 1.")
        page.click("#delete-btn")
        expect(page.locator("#correct-status")).to_contain_text("Last edit: delete mask 1.")
        press(page, "a")  # accept with the correction: the last item stays open
        expect(page.locator("#review-status")).to_contain_text("Saved item flag: corrected with 1 edit")
        bar_says(page, "2 of 3 reviewed (1 accepted, 1 corrected)")
        assert saved_state(batch, "flag") == "corrected"

        with slow_server(page):  # two quick presses each way, the second while the first is on its way: all count
            press(page, "p")
            press(page, "p")
            bar_says(page, "Item 1 of 3: cup")
            press(page, "n")
            press(page, "n")
            bar_says(page, "Item 3 of 3: flag")
        bar_says(page, "review: corrected")
        expect(page.locator("#correct-status")).to_contain_text("Corrected answer: 0 masks")
        page.screenshot(path=str(SHOTS / "review_02_corrected.png"), full_page=True)

        page.get_by_role("tab", name="Review a batch").click()
        expect(page.locator('#review-table tr[data-state="corrected"]')).to_contain_text("flag")
        page.click("#review-export-btn")
        expect(page.locator("#review-status")).to_contain_text("Exported reviewed_coco.json: 2 images, 1 mask")
        downloaded = browser_app.download(page, "#review-download", EXPORT_FILE, tmp_path / "downloads")
        document = json.loads(downloaded.read_text())
        assert document == json.loads((batch / EXPORT_FILE).read_text())
        assert [(i["id"], i["item_id"], i["review"]) for i in document["images"]] == [
            (1, "cup", "accepted"), (3, "flag", "corrected")]
        assert [(a["image_id"], a["category_id"], a["bbox"], a["area"]) for a in document["annotations"]] == [
            (1, 1, [200.0, 40.0, 220.0, 270.0], 220 * 270)]
        assert document["info"]["left_out"] == ["dog"]
