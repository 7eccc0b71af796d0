"""The Correct tab in headless Chromium: after a run, paint, zoom, click, toggle, keyboard shortcuts, undo, export and
re-import.

Starts ``python app.py --preset tiny --script tests/data/ui_script.json`` (random tiny SAM 3 and SAM 3 point model,
scripted VLM) the same way as ``test_app_browser.py`` and drives it with Playwright on a real photo (coffee.jpg,
600x400, shown at its own size). Every step waits for what a person waits for (the tab in front, the canvas shown
and still, the status saying an export is done), never a fixed time. Screenshots go to ``browser_app.SHOTS``
/correct_*.png (a temporary folder). Skipped only when /usr/bin/chromium is missing.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

if not Path("/usr/bin/chromium").exists():
    pytest.skip("Chromium is not installed at /usr/bin/chromium (CI installs it with apt-get)",
                allow_module_level=True)

import browser_app
from browser_app import ROOT, RUN_MS, SHOTS, new_page, open_page, running_app, show_tab
from playwright.sync_api import Page, expect
from pycocotools.coco import COCO

from sam3_agent.correct.export import load_bundle
from sam3_agent.edit_ops import BoxMask, BrushStroke, ClickMask
from sam3_agent.ui.correct.layout import DEFAULT_BRUSH_PX

PHOTO = ROOT / "sam3_agent" / "assets" / "coffee.jpg"  # 600 x 400
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


def on_canvas(page: Page, x: float, y: float) -> tuple[float, float]:
    """The screen position of image pixel (x, y)'s centre on the canvas, at whatever zoom and pan it shows."""
    image = page.locator("#correct-canvas img.cv-image")
    box = image.bounding_box()
    width, height = (float(image.get_attribute(a)) for a in ("width", "height"))
    return box["x"] + (x + 0.5) * box["width"] / width, box["y"] + (y + 0.5) * box["height"] / height


def bring_canvas_into_view(page: Page) -> None:
    """What a person does before clicking on the canvas: scroll until it shows, and wait for the picture (shown and
    loaded). Done once before a click or drag: nothing may scroll the page in the middle of a drag."""
    page.locator("#correct-canvas .cv-viewport").scroll_into_view_if_needed()
    image = page.locator("#correct-canvas img.cv-image")
    expect(image).to_be_visible()
    expect(image).to_have_js_property("complete", True)


def click_canvas(page: Page, x: float, y: float) -> None:
    bring_canvas_into_view(page)
    page.mouse.click(*on_canvas(page, x, y))


def drag_on_canvas(page: Page, points: list[tuple[int, int]]) -> None:
    """Drag the brush through image pixels ``points``."""
    bring_canvas_into_view(page)
    page.mouse.move(*on_canvas(page, *points[0]))
    page.mouse.down()
    for x, y in points[1:]:
        page.mouse.move(*on_canvas(page, x, y), steps=4)
    page.mouse.up()


def zoom_level(page: Page) -> int:
    return int(page.locator("#correct-canvas .cv-level").inner_text().rstrip("%"))


def press(page: Page, key: str) -> None:
    """A keyboard shortcut, typed with the focus on the page (not in a text field)."""
    page.locator("#correct-shortcuts").click()
    page.keyboard.press(key)


def download(page: Page, button: str, name: str, folder: Path, exported: str) -> Path:
    """Press an export button, wait until the status says ``exported`` (what a person waits for: until then the link
    may still offer the previous export), then download the file it offers (named ``name``)."""
    page.click(button)
    status_says(page, exported)
    return browser_app.download(page, "#correct-download", name, folder)


def show_correct_tab(page: Page) -> None:
    """Wait until the Correct tab is in front (a button in another tab brings it there) with its canvas shown: its
    contents may update seconds before the tab comes to the front on a busy machine."""
    expect(page.get_by_role("tab", name="Correct", exact=True)).to_have_attribute("aria-selected", "true")
    expect(page.locator("#correct-canvas .cv-viewport")).to_be_visible()


@pytest.fixture(scope="module")
def corrected(page, tmp_path_factory):
    """A run, then in the Correct tab: a brush stroke (new mask 2), Esc (nothing selected), zoom in, a point click
    (new mask 3), mask 1 hidden then shown again with the Z key; the COCO export and the bundle."""
    folder = tmp_path_factory.mktemp("downloads")
    page.set_input_files("#input-image input[type=file]", str(PHOTO))
    page.wait_for_selector("#input-image img")
    page.fill("#query textarea", "the cup on the saucer")
    page.click("#run-btn")
    page.wait_for_selector("#status .status-done", timeout=RUN_MS)

    page.click("#correct-run-btn")
    show_correct_tab(page)
    status_says(page, "Corrected answer: 1 mask (the agent chose 1).")
    expect(page.locator("#correct-canvas img.cv-image")).to_be_visible()
    expect(page.locator("#correct-canvas .cv-level")).to_have_text(re.compile(r"^[0-9]+%$"))
    expect(page.locator("#correct-shortcuts")).to_contain_text("Z / Ctrl+Z undo")  # the keys are on the page
    page.locator("#correct-canvas .cv-viewport").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "correct_01_loaded.png"), full_page=True)

    press(page, "5")  # the Paint tool
    expect(page.locator("#canvas-tool input[type=radio]").nth(4)).to_be_checked()
    drag_on_canvas(page, [(STROKE_X0, STROKE_Y), ((STROKE_X0 + STROKE_X1) // 2, STROKE_Y), (STROKE_X1, STROKE_Y)])
    status_says(page, "Last edit: paint a new mask.")
    page.locator("#correct-canvas").screenshot(path=str(SHOTS / "correct_02_stroke.png"))

    press(page, "Escape")  # nothing selected: the next click makes a new mask
    status_says(page, "2 masks")
    expect(page.locator("#correct-status")).not_to_contain_text("Selected:")

    fitted = zoom_level(page)
    press(page, "+")
    press(page, "+")
    expect(page.locator("#correct-canvas .cv-level")).not_to_have_text(f"{fitted}%")
    zoomed = zoom_level(page)
    assert zoomed >= fitted * 1.5
    press(page, "3")  # Point on
    click_canvas(page, *CLICK)
    status_says(page, "Last edit: 1 click(s) -> new mask. 2 edits in effect. Selected: mask 3.")
    assert zoom_level(page) == zoomed  # the new answer keeps the zoom
    page.screenshot(path=str(SHOTS / "correct_03_zoomed_point.png"), full_page=True)
    press(page, "0")  # fit again

    page.locator("#mask-toggles label").filter(has_text="1: the cup on the saucer (agent)").click()
    status_says(page, "Last edit: hide mask 1.")
    expect(page.locator('#correct-masks tr[data-mask="1"]')).to_have_class("mask-off")
    page.screenshot(path=str(SHOTS / "correct_04_hidden.png"), full_page=True)
    press(page, "z")
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
        {"edited_by_hand": False, "origin": "agent", "verification": "confirmed"},
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
    radius = DEFAULT_BRUSH_PX / 2  # the photo is shown at its own size: brush pixels are photo pixels
    assert abs((rows[0] + rows[-1]) / 2 - STROKE_Y) <= 1 and abs((rows[-1] - rows[0] + 1) - 2 * radius) <= 2
    assert abs(cols[0] - (STROKE_X0 - radius)) <= 2 and abs(cols[-1] - (STROKE_X1 + radius)) <= 2
    assert stroke[STROKE_Y, STROKE_X0:STROKE_X1 + 1].all()


def test_the_bundle_keeps_the_edits_with_the_click_in_image_pixels(corrected):
    bundle = load_bundle(corrected[1].read_bytes())
    edits = bundle.trace.edits
    assert [type(op) for op in edits] == [BrushStroke, ClickMask]  # the undone toggle is not saved
    # clicked while zoomed in: still the pixel under the pointer (its centre, x + 0.5, in the pixel-edge convention)
    ((x, y),) = edits[1].points
    assert edits[1].index is None and abs(x - (CLICK[0] + 0.5)) < 0.5 and abs(y - (CLICK[1] + 0.5)) < 0.5
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
    expect(page.locator("#correct-status")).not_to_contain_text("Selected:")  # the reloaded session: none
    press(page, "6")  # Erase, with no mask selected
    expect(page.locator("#canvas-tool input[type=radio]").nth(5)).to_be_checked()
    drag_on_canvas(page, [(100, 100), (140, 100)])
    status_says(page, "Select a mask to erase from (in the list, or click on it with the Select tool). Nothing was "
                      "changed.")
    junk = tmp_path / "not_a_bundle.zip"
    junk.write_bytes(b"plain text, not a zip")
    page.set_input_files("#correct-file input[type=file]", str(junk))
    status_says(page, "not a .zip trace")
    page.screenshot(path=str(SHOTS / "correct_07_bad_input.png"), full_page=True)
    expect(page.locator("#correct-masks tr[data-mask]")).to_have_count(2)  # the reloaded session is intact
    page.click("#redo-btn")
    status_says(page, "Corrected answer: 3 masks")


def test_relabel_a_negative_click_bring_in_delete_and_the_png_export(page, corrected, tmp_path):
    import zipfile

    from PIL import Image

    page.locator("#selected-mask input").click()
    page.get_by_role("option", name=re.compile(r"^3: ")).click()
    status_says(page, "Selected: mask 3.")
    page.locator("#mask-label input").fill("spoon")
    page.click("#label-btn")
    status_says(page, "Last edit: label mask 3 'spoon'.")
    expect(page.locator('#correct-masks tr[data-mask="3"]')).to_contain_text("spoon")
    page.locator("#mask-label input").click()  # the label list now offers it again
    expect(page.get_by_role("option", name="spoon")).to_be_visible()
    page.keyboard.press("Escape")

    press(page, "4")  # Point off
    click_canvas(page, *NEGATIVE)
    status_says(page, "Last edit: 2 click(s) -> mask 3.")  # the positive click that made it, then this one

    page.locator("#bring-in").get_by_text("Bring in a mask from any round").click()
    page.click("#bring-btn")  # round 1, mask 1: the agent's first phrase
    status_says(page, "Corrected answer: 4 masks (the agent chose 1). Last edit: bring in mask 1 of round 1.")
    status_says(page, "Selected: mask 4.")  # the mask brought in
    press(page, "Delete")
    status_says(page, "Last edit: delete mask 4.")
    expect(page.locator("#correct-masks tr[data-mask]")).to_have_count(3)

    archive = download(page, "#export-png-btn", "corrected_masks_png.zip", tmp_path, "Exported PNG masks (3 masks)")
    with zipfile.ZipFile(archive) as pngs:
        names = sorted(pngs.namelist())
        assert names == ["mask_001.png", "mask_002.png", "mask_003.png"]
        for name in names:
            with pngs.open(name) as f, Image.open(f) as mask:
                assert mask.size == (600, 400) and set(np.unique(np.asarray(mask))) <= {0, 255}
    coco = COCO(str(download(page, "#export-coco-btn", "corrected_masks.json", tmp_path,
                             "Exported COCO JSON (3 masks)")))
    assert coco.imgs[1]["file_name"] == PHOTO.name  # the uploaded photo's name, not image.png
    assert [coco.cats[a["category_id"]]["name"] for a in coco.loadAnns(coco.getAnnIds())] == [
        "the cup on the saucer", "the cup on the saucer", "spoon"]
    page.screenshot(path=str(SHOTS / "correct_08_relabel_bring_delete.png"), full_page=True)


def test_outline_mode_and_opacity_redraw_the_masks(page, corrected):
    before = page.locator("#correct-canvas img.cv-image").get_attribute("src")
    press(page, "o")
    expect(page.locator("#outline-mode input")).to_be_checked()
    expect(page.locator("#correct-canvas img.cv-image")).not_to_have_attribute("src", before)
    page.locator("#correct-canvas").screenshot(path=str(SHOTS / "correct_09_outlines.png"))
    press(page, "o")
    expect(page.locator("#outline-mode input")).not_to_be_checked()


# records, at the moment each pointer press ends (after the canvas has taken it), what the pending marker says
WATCH_PENDING = """() => { window.__pendingSeen = [];
  document.addEventListener('pointerup', () => window.__pendingSeen.push(
    document.querySelector('#correct-canvas .cv-pending')?.textContent || ''));
}"""
RAPID = [(300, 120), (320, 140), (280, 150)]  # image pixels of three quick Point-on clicks on the cup


def rapid_edits(page: Page, tap) -> None:
    """Esc then three point clicks sent without waiting (``tap(x, y)`` clicks or taps the screen): each shows a
    pending marker at once, and all four are applied in order: nothing selected, then one mask from three clicks;
    then three quick Z presses undo the three clicks (each click is an edit), and three Y presses redo them."""
    status = page.locator("#correct-status")
    masks = int(re.search(r"Corrected answer: (\d+) mask", status.inner_text()).group(1))
    page.evaluate(WATCH_PENDING)
    bring_canvas_into_view(page)
    page.keyboard.press("Escape")
    for x, y in RAPID:
        tap(*on_canvas(page, x, y))
    assert [seen.startswith("Applying ") for seen in page.evaluate("window.__pendingSeen")] == [True] * 3
    page.locator("#correct-canvas").screenshot(path=str(SHOTS / f"correct_pending_{page.viewport_size['width']}.png"))
    # one new mask (Esc came first) made of all three clicks
    expect(status).to_contain_text(re.compile(rf"Corrected answer: {masks + 1} masks .* Last edit: 3 click\(s\) "
                                              r"-> mask (\d+)\. \d+ edits in effect\. Selected: mask \1\."))
    expect(page.locator("#correct-canvas .cv-pending")).to_be_hidden()  # all answered
    page.locator("#correct-canvas").screenshot(path=str(SHOTS / f"correct_rapid_{page.viewport_size['width']}.png"))
    in_effect = int(re.search(r"(\d+) edits in effect", page.locator("#correct-status").inner_text()).group(1))
    for _ in range(3):
        page.keyboard.press("z")
    status_says(page, f"{in_effect - 3} edits in effect, 3 to redo.")
    for _ in range(3):
        page.keyboard.press("y")
    status_says(page, f"{in_effect} edits in effect.")


def test_rapid_clicks_and_keys_are_all_applied_in_order_and_a_key_works_after_a_tool_button(page, corrected):
    page.locator("#canvas-tool label").filter(has_text="5 Paint").click()  # the radio now has the focus
    expect(page.locator("#canvas-tool input[type=radio]").nth(4)).to_be_focused()
    page.keyboard.press("3")  # a shortcut typed right after clicking a tool button
    expect(page.locator("#canvas-tool input[type=radio]").nth(2)).to_be_checked()
    rapid_edits(page, page.mouse.click)


TABS = {"Run": "#run-btn", "Inspect a trace": "#trace-file", "Correct": "#correct-canvas",
        "Review a batch": "#tab-review"}


def test_on_a_phone_every_tab_shows_and_rapid_taps_are_all_applied(app_url, page, corrected):
    # a phone (a touch screen: tabs and tools are tapped) in the module's browser (one Playwright per process)
    phone = new_page(page.context.browser, app_url, browser_app.PHONE)
    try:
        for name, panel in TABS.items():  # each tab is in the tab bar itself, not behind a menu
            expect(phone.get_by_role("tab", name=name, exact=True)).to_be_visible()
            show_tab(phone, name, panel)  # tapped
        phone.screenshot(path=str(SHOTS / "correct_phone_1_tabs.png"))
        show_tab(phone, "Correct", "#correct-canvas")
        phone.set_input_files("#correct-file input[type=file]", str(corrected[1]))  # the bundle saved above
        status_says(phone, "Corrected answer: 3 masks (the agent chose 1).")
        table = phone.locator("#correct-masks table")
        table.scroll_into_view_if_needed()
        box = table.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= browser_app.PHONE["width"]  # no column cut off
        assert phone.evaluate("document.documentElement.scrollWidth") == browser_app.PHONE["width"]  # nor sideways
        phone.screenshot(path=str(SHOTS / "correct_phone_2_loaded.png"), full_page=True)
        browser_app.press(phone.locator("#canvas-tool label").filter(has_text="3 Point on (+)"))
        rapid_edits(phone, phone.touchscreen.tap)
    finally:
        phone.context.close()


BOX = (180, 20, 420, 300)  # image pixels of the box drawn around the cup (x1, y1, x2, y2)


def test_a_box_dragged_on_the_canvas_makes_a_mask_inside_it_and_a_flat_one_is_refused(page, corrected, tmp_path):
    status = page.locator("#correct-status")
    masks = int(re.search(r"Corrected answer: (\d+) mask", status.inner_text()).group(1))
    rows = page.locator("#correct-masks tr[data-mask]").count()
    press(page, "Escape")  # nothing selected: the box makes a new mask
    expect(status).not_to_contain_text("Selected:")
    press(page, "7")  # the Box tool
    expect(page.locator("#canvas-tool input[type=radio]").nth(6)).to_be_checked()
    drag_on_canvas(page, [(BOX[0], BOX[1]), ((BOX[0] + BOX[2]) // 2, (BOX[1] + BOX[3]) // 2), (BOX[2], BOX[3])])
    expect(status).to_contain_text(re.compile(rf"Corrected answer: {masks + 1} masks .* Last edit: box -> new mask\. "
                                              r".* Selected: mask \d+\."))
    page.locator("#correct-canvas").screenshot(path=str(SHOTS / "correct_10_box.png"))
    # a drag along a line has no area: refused with a message, nothing lost
    drag_on_canvas(page, [(100, 350), (300, 350)])
    status_says(page, "has no area on the image: drag a box around the object (or tap two opposite corners). "
                      "Nothing was changed.")
    expect(page.locator("#correct-masks tr[data-mask]")).to_have_count(rows + 1)
    page.screenshot(path=str(SHOTS / "correct_11_box_refused.png"), full_page=True)
    bundle = load_bundle(download(page, "#export-bundle-btn", "bundle.zip", tmp_path,
                                  f"Exported the bundle ({masks + 1} masks)").read_bytes())
    last = bundle.trace.edits[-1]
    assert isinstance(last, BoxMask) and last.index is None and last.points == ()
    # the box in the photo's pixels: the corners' pixel centres (x + 0.5), whatever the canvas's zoom
    assert all(abs(got - (want + 0.5)) < 0.5 for got, want in zip(last.box, BOX))
    assert len(bundle.state.corrected_items()) == masks + 1


def test_on_a_phone_two_taps_draw_a_box(app_url, page, corrected):
    phone = new_page(page.context.browser, app_url, browser_app.PHONE)  # a touch screen: every press is a tap
    try:
        show_tab(phone, "Correct", "#correct-canvas")
        phone.set_input_files("#correct-file input[type=file]", str(corrected[1]))  # the bundle saved above
        status_says(phone, "Corrected answer: 3 masks (the agent chose 1).")
        browser_app.press(phone.locator("#canvas-tool label").filter(has_text="7 Box"))
        bring_canvas_into_view(phone)
        phone.touchscreen.tap(*on_canvas(phone, BOX[0], BOX[1]))  # one corner: a cross, and the hint
        expect(phone.locator("#correct-canvas .cv-pending")).to_have_text("Box: tap the opposite corner")
        phone.locator("#correct-canvas").screenshot(path=str(SHOTS / "correct_phone_3_box_corner.png"))
        phone.touchscreen.tap(*on_canvas(phone, BOX[2], BOX[3]))  # the opposite one
        status_says(phone, "Corrected answer: 4 masks (the agent chose 1). Last edit: box -> new mask.")
        expect(phone.locator("#correct-canvas .cv-pending")).to_be_hidden()
        phone.screenshot(path=str(SHOTS / "correct_phone_4_box.png"), full_page=True)
    finally:
        phone.context.close()
