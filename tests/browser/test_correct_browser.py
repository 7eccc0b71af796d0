"""The Correct view in headless Chromium: after a run, paint, click, toggle, undo, export and re-import.

Starts ``python app.py --preset tiny --script tests/data/ui_script.json`` (random tiny SAM 3 and SAM 3 point model,
scripted VLM) the same way as ``test_app_browser.py`` and drives it with Playwright on a real photo (coffee.jpg,
600x400, shown at its own size). Screenshots go to ``browser_app.SHOTS``/correct_*.png (a temporary folder). Skipped
only when /usr/bin/chromium is missing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

if not Path("/usr/bin/chromium").exists():
    pytest.skip("Chromium is not installed at /usr/bin/chromium (CI installs it with apt-get)",
                allow_module_level=True)

import browser_app
from browser_app import ROOT, RUN_MS, SHOTS, open_page, ready, running_app, show_tab
from playwright.sync_api import Page, expect
from pycocotools.coco import COCO

from sam3_agent.edits import BrushStroke, ClickMask
from sam3_agent.export import load_bundle

PHOTO = ROOT / "assets" / "coffee.jpg"  # 600 x 400
CLICK = (300, 120)  # image pixels of the point click
NEGATIVE = (550, 350)  # image pixels of a later point OFF the object
STROKE_Y, STROKE_X0, STROKE_X1 = 300, 150, 450  # image pixels of the brush stroke (a horizontal line)


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    with running_app(tmp_path_factory.mktemp("app"), {}) as url:
        yield url


@pytest.fixture(scope="module")
def page(app_url, tmp_path_factory):
    with open_page(app_url, tmp_path_factory.mktemp("chromium-profile")) as page:
        yield page


def status_says(page: Page, text: str) -> None:
    expect(page.locator("#correct-status")).to_contain_text(text)


def click_image(page: Page, selector: str, x: int, y: int) -> None:
    """Click image pixel (x, y) of the <img> in ``selector`` (shown scaled and letterboxed: object-fit contain), once
    a person could: the image shown, loaded and still."""
    image = ready(page.locator(f"{selector} img"))
    expect(image).to_have_js_property("complete", True)
    box = image.bounding_box()
    natural_w, natural_h = image.evaluate("e => [e.naturalWidth, e.naturalHeight]")
    scale = min(box["width"] / natural_w, box["height"] / natural_h)
    left = box["x"] + (box["width"] - natural_w * scale) / 2
    top = box["y"] + (box["height"] - natural_h * scale) / 2
    page.mouse.click(left + (x + 0.5) * scale, top + (y + 0.5) * scale)


def editor_zoom(page: Page) -> str:
    zoom = page.locator("#correct-editor span").filter(has_text="%").first
    expect(zoom).to_be_visible()
    return zoom.inner_text().strip()


def drag_on_editor(page: Page, points: list[tuple[int, int]], width: int, height: int) -> None:
    """Drag the brush through image pixels ``points`` on the ImageEditor canvas (the image is centred at the zoom
    the editor shows)."""
    canvas = ready(page.locator("#correct-editor canvas").first).bounding_box()
    zoom = float(editor_zoom(page).rstrip("%")) / 100
    left = canvas["x"] + (canvas["width"] - width * zoom) / 2
    top = canvas["y"] + (canvas["height"] - height * zoom) / 2
    page.mouse.move(left + points[0][0] * zoom, top + points[0][1] * zoom)
    page.mouse.down()
    for x, y in points[1:]:  # few moves: each one redraws the canvas, slowly in software WebGL
        page.mouse.move(left + x * zoom, top + y * zoom)
    page.mouse.up()


def download(page: Page, button: str, name: str, folder: Path, exported: str) -> Path:
    """Press an export button, wait until the status says ``exported`` (what a person waits for: until then the link
    may still offer the previous export), then download the file it offers (named ``name``)."""
    page.click(button)
    status_says(page, exported)
    return browser_app.download(page, "#correct-download", name, folder)


def show_correct_tab(page: Page) -> None:
    """Wait until the Correct tab is in front (a button in another tab brings it there) with its editor shown."""
    expect(page.get_by_role("tab", name="Correct", exact=True)).to_have_attribute("aria-selected", "true")
    expect(page.locator("#correct-editor")).to_be_visible()


@pytest.fixture(scope="module")
def corrected(page, tmp_path_factory):
    """A run, then in the Correct view: a brush stroke (new mask 2), nothing selected, a point click (new mask 3),
    mask 1 hidden then shown again with Undo; the COCO export and the bundle."""
    folder = tmp_path_factory.mktemp("downloads")
    page.set_input_files("#input-image input[type=file]", str(PHOTO))
    page.wait_for_selector("#input-image img")
    page.fill("#query textarea", "the cup on the saucer")
    page.click("#run-btn")
    page.wait_for_selector("#status .status-done", timeout=RUN_MS)
    show_tab(page, "Correct", "#correct-editor")
    empty_zoom = editor_zoom(page)  # the editor before it has an image
    show_tab(page, "Run", "#correct-run-btn")

    page.click("#correct-run-btn")
    show_correct_tab(page)
    status_says(page, "Corrected answer: 1 mask (the agent chose 1).")
    expect(page.locator("#correct-agent-overlay img")).to_be_visible()
    page.wait_for_function(  # the brush canvas has taken the photo
        "z => Array.from(document.querySelectorAll('#correct-editor span')).some("
        "e => /^[0-9]+%$/.test(e.textContent.trim()) && e.textContent.trim() !== z)", arg=empty_zoom)
    page.screenshot(path=str(SHOTS / "correct_01_loaded.png"), full_page=True)

    drag_on_editor(page, [(STROKE_X0, STROKE_Y), ((STROKE_X0 + STROKE_X1) // 2, STROKE_Y), (STROKE_X1, STROKE_Y)],
                   600, 400)
    page.locator("#correct-editor").screenshot(path=str(SHOTS / "correct_02_stroke.png"))
    page.click("#paint-btn")
    status_says(page, "Last edit: paint a new mask.")

    page.locator("#selected-mask input").click()
    page.get_by_role("option", name="none: clicks and brush make a new mask").click()
    status_says(page, "2 masks")
    expect(page.locator("#correct-status")).not_to_contain_text("Selected:")

    page.get_by_label("Add a point ON the object (SAM 3)").check()
    click_image(page, "#correct-overlay", *CLICK)
    status_says(page, "Last edit: 1 click(s) -> new mask. 2 edits in effect. Selected: mask 3.")
    page.screenshot(path=str(SHOTS / "correct_03_point.png"), full_page=True)

    page.locator("#mask-toggles label").filter(has_text="1: the cup on the saucer (agent)").click()
    status_says(page, "Last edit: hide mask 1.")
    expect(page.locator('#correct-masks tr[data-mask="1"]')).to_have_class("mask-off")
    page.screenshot(path=str(SHOTS / "correct_04_hidden.png"), full_page=True)
    page.click("#undo-btn")
    status_says(page, "2 edits in effect, 1 to redo.")
    expect(page.locator('#correct-masks tr[data-mask="1"]')).to_have_class("mask-on")
    expect(page.locator("#mask-toggles input[type=checkbox]").first).to_be_checked()

    coco_path = download(page, "#export-coco-btn", "corrected_masks.json", folder, "Exported COCO JSON (3 masks)")
    page.screenshot(path=str(SHOTS / "correct_05_exported.png"), full_page=True)
    bundle_path = download(page, "#export-bundle-btn", "bundle.zip", folder, "Exported the bundle (3 masks)")
    return coco_path, bundle_path


def test_the_exported_coco_has_the_agent_mask_and_the_two_hand_made_ones(corrected):
    coco = COCO(str(corrected[0]))
    annotations = coco.loadAnns(coco.getAnnIds())
    assert coco.imgs[1]["width"] == 600 and coco.imgs[1]["height"] == 400
    assert len(annotations) == 3
    assert [a["attributes"] for a in annotations] == [
        {"edited_by_hand": False, "origin": "agent"},
        {"edited_by_hand": True, "origin": "brush"},
        {"edited_by_hand": True, "origin": "clicks"},
    ]
    assert [coco.cats[a["category_id"]]["name"] for a in annotations] == ["the cup on the saucer"] * 3


def test_the_brush_stroke_lands_where_it_was_drawn_at_the_image_resolution(corrected):
    coco = COCO(str(corrected[0]))
    stroke = coco.annToMask(coco.loadAnns(coco.getAnnIds())[1]).astype(bool)
    assert stroke.shape == (400, 600)
    rows = np.flatnonzero(stroke.any(axis=1))
    cols = np.flatnonzero(stroke.any(axis=0))
    radius = (rows[-1] - rows[0] + 1) / 2  # the brush's size is the editor's own default
    assert abs((rows[0] + rows[-1]) / 2 - STROKE_Y) <= 2
    assert abs(cols[0] - (STROKE_X0 - radius)) <= 3 and abs(cols[-1] - (STROKE_X1 + radius)) <= 3
    assert stroke[STROKE_Y, STROKE_X0:STROKE_X1 + 1].all()


def test_the_bundle_keeps_the_edits_with_the_click_in_image_pixels(corrected):
    bundle = load_bundle(corrected[1].read_bytes())
    edits = bundle.trace.edits
    assert [type(op) for op in edits] == [BrushStroke, ClickMask]  # the undone toggle is not saved
    assert edits[1].index is None and edits[1].points == ((float(CLICK[0]), float(CLICK[1])),)
    assert edits[1].labels == (1,)
    assert len(bundle.state.corrected_items()) == 3


def test_the_bundle_reloads_in_the_inspect_tab_and_editing_goes_on(page, corrected):
    show_tab(page, "Inspect a trace", "#trace-file")
    page.set_input_files("#trace-file input[type=file]", str(corrected[1]))
    expect(page.locator("#inspect-status")).to_contain_text("2 hand corrections saved with it")
    page.click("#correct-inspect-btn")
    show_correct_tab(page)
    status_says(page, "Corrected answer: 3 masks (the agent chose 1). Last edit: 1 click(s) -> new mask.")
    expect(page.locator("#correct-masks tr[data-mask]")).to_have_count(3)
    expect(page.locator("#undo-btn")).to_be_enabled()
    page.click("#undo-btn")
    status_says(page, "Corrected answer: 2 masks (the agent chose 1). Last edit: paint a new mask.")
    page.screenshot(path=str(SHOTS / "correct_06_reloaded.png"), full_page=True)


def test_bad_input_gives_a_message_and_keeps_the_masks(page, corrected, tmp_path):
    page.click("#erase-btn")
    status_says(page, "Nothing was painted: draw on the image with the brush first. Nothing was changed.")
    junk = tmp_path / "not_a_bundle.zip"
    junk.write_bytes(b"plain text, not a zip")
    page.set_input_files("#correct-file input[type=file]", str(junk))
    status_says(page, "not a .zip trace")
    page.screenshot(path=str(SHOTS / "correct_07_bad_input.png"), full_page=True)
    expect(page.locator("#correct-masks tr[data-mask]")).to_have_count(2)  # the reloaded session is intact
    page.click("#redo-btn")
    status_says(page, "Corrected answer: 3 masks")


def test_relabel_a_negative_click_bring_in_delete_and_the_png_export(page, corrected, tmp_path):
    import re
    import zipfile

    from PIL import Image

    page.locator("#selected-mask input").click()
    page.get_by_role("option", name=re.compile(r"^3: ")).click()
    status_says(page, "Selected: mask 3.")
    page.locator("#mask-label textarea, #mask-label input").first.fill("spoon")
    page.click("#label-btn")
    status_says(page, "Last edit: label mask 3 'spoon'.")
    expect(page.locator('#correct-masks tr[data-mask="3"]')).to_contain_text("spoon")

    page.get_by_label("Add a point OFF the object (SAM 3)").check()
    click_image(page, "#correct-overlay", *NEGATIVE)
    status_says(page, "Last edit: 2 click(s) -> mask 3.")  # the positive click that made it, then this one

    page.click("#bring-btn")  # round 1, mask 1: the agent's first phrase
    status_says(page, "Corrected answer: 4 masks (the agent chose 1). Last edit: bring in mask 1 of round 1.")
    status_says(page, "Selected: mask 4.")  # the mask brought in
    page.click("#delete-btn")
    status_says(page, "Last edit: delete mask 4.")
    expect(page.locator("#correct-masks tr[data-mask]")).to_have_count(3)

    archive = download(page, "#export-png-btn", "corrected_masks_png.zip", tmp_path, "Exported PNG masks (3 masks)")
    with zipfile.ZipFile(archive) as pngs:
        names = sorted(pngs.namelist())
        assert names == ["mask_001.png", "mask_002.png", "mask_003.png"]
        for name in names:
            with pngs.open(name) as f, Image.open(f) as mask:
                assert mask.size == (600, 400) and set(np.unique(np.asarray(mask))) <= {0, 255}
    coco = COCO(str(download(page, "#export-coco-btn", "corrected_masks.json", tmp_path, "Exported COCO JSON (3 masks)")))
    assert coco.imgs[1]["file_name"] == PHOTO.name  # the uploaded photo's name, not image.png
    assert [coco.cats[a["category_id"]]["name"] for a in coco.loadAnns(coco.getAnnIds())] == [
        "the cup on the saucer", "the cup on the saucer", "spoon"]
    page.screenshot(path=str(SHOTS / "correct_08_relabel_bring_delete.png"), full_page=True)
