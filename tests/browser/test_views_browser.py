"""What a person sees, in headless Chromium on a desktop (1440x900, mouse and keys) and a phone (390x844, touch):
example thumbnails that stay in view once an example is picked, in a table that never scrolls sideways; the
verifier's views on a verdict card opened larger and closed again (Run tab, Inspect tab); the Correct tab's tools and
canvas in view at once.

Starts ``python app.py --preset tiny --script tests/data/ui_script.json`` once for the module and opens one browser
with a desktop page and a phone page (a touch screen: every press there is a tap). Every step waits for what a person
waits for (an element shown, a status line), never a fixed time. Screenshots go to ``browser_app.SHOTS``/views_*.png.
Skipped only when /usr/bin/chromium is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

if not Path("/usr/bin/chromium").exists():
    pytest.skip("Chromium is not installed at /usr/bin/chromium (CI installs it with apt-get)",
                allow_module_level=True)

from browser_app import (
    DESKTOP,
    PHONE,
    RUN_MS,
    SHOTS,
    download,
    in_view,
    new_page,
    open_browser,
    press,
    running_app,
    show_tab,
)
from playwright.sync_api import Page, expect

EXAMPLE = 2  # the third example: coffee.jpg, "the spoon resting on the saucer"
EXAMPLE_QUERY = "the spoon resting on the saucer"
CARD_VIEW = '#rounds section[data-round="3"] button.card-view'  # round 3 examines the mask: one verdict card


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    with running_app(tmp_path_factory.mktemp("app"), {}) as url:
        yield url


@pytest.fixture(scope="module")
def pages(app_url, tmp_path_factory):
    """The desktop page and the phone page, in one browser."""
    with open_browser(tmp_path_factory.mktemp("downloads")) as browser:
        opened = {"desktop": new_page(browser, app_url, DESKTOP), "phone": new_page(browser, app_url, PHONE)}
        yield opened
        for page in opened.values():
            page.context.close()


def pick_example(page: Page, row: int) -> None:
    """Press example ``row`` by its query (a click, or a tap on the phone) and wait until the inputs hold it."""
    cell = page.locator(f'#run-examples [data-testid="dataset-cell-{row}-1"]')
    cell.scroll_into_view_if_needed()
    press(cell)
    expect(page.locator("#query textarea")).to_have_value(EXAMPLE_QUERY)
    expect(page.locator("#input-image img")).to_be_visible()


@pytest.fixture(scope="module")
def finished(pages, tmp_path_factory):
    """A run from the coffee example on the desktop page, and its trace .zip."""
    page = pages["desktop"]
    pick_example(page, EXAMPLE)
    page.click("#run-btn")
    expect(page.locator("#status")).to_contain_text("Done: 1 mask selected after 4 rounds.", timeout=RUN_MS)
    return download(page, "#downloads", "trace.zip", tmp_path_factory.mktemp("trace"))


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_example_thumbnails_stay_in_view_after_a_pick_and_the_table_never_scrolls_sideways(pages, size):
    page = pages[size]
    table = page.locator("#run-examples .table-wrap")
    pick_example(page, EXAMPLE)
    page.screenshot(path=str(SHOTS / f"views_{size}_1_example_picked.png"), full_page=True)
    width, shown = table.evaluate("(el) => [el.scrollWidth, el.clientWidth]")
    assert width <= shown  # nothing to scroll sideways to
    box = table.bounding_box()
    thumbnails = page.locator("#run-examples td.image img")
    expect(thumbnails).to_have_count(5)
    for index in range(5):
        thumbnail = thumbnails.nth(index)
        expect(thumbnail).to_be_visible()
        expect(thumbnail).to_have_js_property("complete", True)
        seen = thumbnail.bounding_box()
        # wholly inside the table's visible part and the window, side to side
        assert box["x"] <= seen["x"] and seen["x"] + seen["width"] <= box["x"] + box["width"], (index, seen, box)
        assert 0 <= seen["x"] and seen["x"] + seen["width"] <= page.viewport_size["width"]
    assert page.evaluate("document.documentElement.scrollWidth") == page.viewport_size["width"]
    expect(page.locator("#run-examples th")).to_have_text(["Image", "Query"])  # short headers, not the upload label


def enlarged(page: Page, opener) -> None:
    """The dialog shows the picture of ``opener`` (a card's view) at its own size, larger than on the card, with the
    same alt text as its caption."""
    small = opener.locator("img")
    dialog = page.locator("#view-zoom")
    expect(dialog).to_be_visible()
    big = dialog.locator("img")
    expect(big).to_have_js_property("complete", True)
    alt = small.get_attribute("alt")
    assert alt and big.get_attribute("alt") == alt and dialog.locator("figcaption").inner_text() == alt
    natural = big.evaluate("(img) => [img.naturalWidth, img.naturalHeight]")
    shown = big.bounding_box()
    assert natural == [320, 213]  # the page's copy of the view (html.CARD_SIDE on its longer side), not upscaled
    assert (round(shown["width"]), round(shown["height"])) == tuple(natural)
    assert shown["width"] >= 2 * small.bounding_box()["width"]
    assert in_view(page, "#view-zoom img")


def test_a_verdict_cards_view_opens_larger_by_mouse_or_keyboard_and_closes_again(pages, finished):
    page = pages["desktop"]
    opener = page.locator(CARD_VIEW).first
    expect(opener).to_have_attribute("aria-label", "Enlarge: mask 1 on the photo, as the verifier saw it")
    opener.scroll_into_view_if_needed()
    opener.click()
    enlarged(page, opener)
    expect(page.locator("#view-zoom .view-zoom-close")).to_be_focused()  # the keyboard is in the dialog
    page.screenshot(path=str(SHOTS / "views_desktop_2_card_enlarged.png"))
    page.keyboard.press("Escape")
    expect(page.locator("#view-zoom")).to_be_hidden()
    expect(opener).to_be_focused()  # back where it was
    page.keyboard.press("Enter")  # the same button, from the keyboard
    enlarged(page, opener)
    page.locator("#view-zoom img").click()  # a click on the picture closes it too
    expect(page.locator("#view-zoom")).to_be_hidden()


def test_the_correct_tabs_tools_and_whole_canvas_are_in_view_on_a_desktop(pages, finished):
    page = pages["desktop"]
    page.click("#correct-run-btn")
    expect(page.get_by_role("tab", name="Correct", exact=True)).to_have_attribute("aria-selected", "true")
    expect(page.locator("#correct-status")).to_contain_text("Corrected answer: 1 mask")
    expect(page.locator("#correct-canvas img.cv-image")).to_be_visible()
    parts = ("#correct-status", "#canvas-tool", "#correct-canvas .cv-viewport", "#undo-btn")
    for part in parts:  # wherever the Run tab was scrolled to
        assert in_view(page, part), (part, page.locator(part).bounding_box(), page.evaluate("window.scrollY"))
    page.evaluate("window.scrollTo(0, 0)")  # and with the page at its top, the tab bar in view: no scrolling needed
    page.wait_for_function("() => window.scrollY === 0")
    page.screenshot(path=str(SHOTS / "views_desktop_3_correct.png"))
    for part in parts:
        assert in_view(page, part), (part, page.locator(part).bounding_box())
    assert page.locator("#correct-canvas .cv-viewport").bounding_box()["height"] >= 500  # not shrunk to fit


def test_on_a_phone_a_tapped_card_view_opens_larger_in_inspect_and_correct_shows_tools_and_canvas(pages, finished):
    page = pages["phone"]
    show_tab(page, "Inspect a trace", "#trace-file")  # tapped
    page.set_input_files("#trace-file input[type=file]", str(finished))
    press(page.locator('#timeline tr[data-round="3"] td').nth(1))
    opener = page.locator('#inspect-round section.round[data-round="3"] button.card-view').last
    expect(opener).to_have_attribute("aria-label", "Enlarge: mask 1 up close, as the verifier saw it")
    opener.scroll_into_view_if_needed()
    opener.tap()
    expect(page.locator("#view-zoom")).to_be_visible()
    natural = page.locator("#view-zoom img").evaluate("(img) => [img.naturalWidth, img.naturalHeight]")
    shown = page.locator("#view-zoom img").bounding_box()
    assert max(natural) == 320 and (round(shown["width"]), round(shown["height"])) == tuple(natural)
    assert in_view(page, "#view-zoom img")
    page.screenshot(path=str(SHOTS / "views_phone_2_card_enlarged.png"))
    page.locator("#view-zoom img").tap()
    expect(page.locator("#view-zoom")).to_be_hidden()

    # "Correct this trace": the phone is brought to the status, the tools and the canvas, all in view at once
    press(page.locator("#correct-inspect-btn"))
    expect(page.get_by_role("tab", name="Correct", exact=True)).to_have_attribute("aria-selected", "true")
    expect(page.locator("#correct-canvas img.cv-image")).to_be_visible()
    page.wait_for_function("() => { const r = document.querySelector('#correct-canvas .cv-viewport')"
                           ".getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight; }")
    for part in ("#correct-status", "#canvas-tool", "#correct-canvas .cv-viewport"):
        assert in_view(page, part), (part, page.locator(part).bounding_box(), page.evaluate("window.scrollY"))
    page.screenshot(path=str(SHOTS / "views_phone_3_correct.png"))
    press(page.locator("#canvas-tool label").filter(has_text="3 Point on (+)"))
    canvas = page.locator("#correct-canvas img.cv-image").bounding_box()
    page.touchscreen.tap(canvas["x"] + canvas["width"] / 2, canvas["y"] + canvas["height"] / 2)
    expect(page.locator("#correct-status")).to_contain_text("Last edit: 1 click(s) -> new mask.")
    expect(page.locator("#undo-btn")).to_be_enabled()
    assert in_view(page, "#undo-btn")  # right under the canvas
    press(page.locator("#undo-btn"))
    expect(page.locator("#correct-status")).to_contain_text("Corrected answer: 1 mask")
