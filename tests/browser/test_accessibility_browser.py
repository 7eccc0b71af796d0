"""The page speaks and passes an automated accessibility audit, in headless Chromium at desktop (1440x900) and phone
(390x844) size: the status line is a live region that stays while its text changes (so "Done" and errors are
announced), one top-level heading, and axe-core (vendored in tests/browser/axe/, MPL-2.0) on every tab finds nothing
but the findings in ``GRADIO_FINDINGS``, each in Gradio's own markup and explained there. Empty answer frames stay
hidden until there is something in them (during a run, after Stop).

Starts ``python app.py --preset tiny --script tests/data/ui_script.json`` with the script's pieces slowed down, so a
run streams long enough to be stopped. Every step waits for what a person waits for. Screenshots go to
``browser_app.SHOTS``/a11y_*.png. Skipped only when /usr/bin/chromium is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

if not Path("/usr/bin/chromium").exists():
    pytest.skip("Chromium is not installed at /usr/bin/chromium (CI installs it with apt-get)",
                allow_module_level=True)

from browser_app import DESKTOP, PHONE, ROOT, RUN_MS, SHOTS, open_page, running_app, show_tab
from playwright.sync_api import Page, expect

AXE = Path(__file__).with_name("axe") / "axe.min.js"
PHOTO = ROOT / "sam3_agent" / "assets" / "coffee.jpg"
PIECE_DELAY = "0.05"  # the script's first reply then streams for about 17 s: time to press Stop
TABS = {"Run": "#run-btn", "Inspect a trace": "#trace-file", "Correct": "#correct-canvas",
        "Review a batch": "#tab-review"}
# (axe rule, a piece of the offending element's own HTML) -> why it stays. Each is Gradio 6.31's own markup, the same
# in every Gradio app; the page's own styles fix the rest (page.css: contrast of Gradio's pale texts and buttons).
GRADIO_FINDINGS: dict[tuple[str, str], str] = {
    ("label-content-name-mismatch", 'class="upload-container'):
        "Gradio's upload boxes (image, file) are buttons named 'Click to upload or drop files' that show 'Drop File "
        "Here - or - Click to Upload' (WCAG 2.5.3, a best practice in axe): the name says what the button does, "
        "in other words than its text; the markup is Gradio's component, not the page's",
    ("aria-prohibited-attr", 'class="empty'):
        "Gradio's placeholder of an empty file or image output is a plain <div aria-label='Empty value'> without a "
        "role, so screen readers may not say the label; it is inside Gradio's component",
}
AUDIT = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations.flatMap((v) => v.nodes.map((n) => [v.id, n.html, n.failureSummary]));
}"""


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    with running_app(tmp_path_factory.mktemp("app"), {"SAM3_AGENT_SCRIPT_PIECE_DELAY": PIECE_DELAY}) as url:
        yield url


def audit(page: Page) -> list[tuple[str, str, str]]:
    """axe-core's violations on the page as it shows now: (rule, element's HTML, what fails), less
    ``GRADIO_FINDINGS``."""
    if not page.evaluate("typeof axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    found = [tuple(v) for v in page.evaluate(AUDIT)]
    return [v for v in found if not any(rule == v[0] and where in v[1] for rule, where in GRADIO_FINDINGS)]


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_every_tab_passes_the_accessibility_audit(app_url, tmp_path, size):
    with open_page(app_url, tmp_path / "profile", viewport={"desktop": DESKTOP, "phone": PHONE}[size]) as page:
        assert page.locator("h1").all_inner_texts() == ["SAM3 Agent"]  # one top-level heading
        found = {}
        for name, panel in TABS.items():
            show_tab(page, name, panel)
            found[name] = audit(page)
            page.screenshot(path=str(SHOTS / f"a11y_{size}_{name.split()[0].lower()}.png"))
        assert found == {name: [] for name in TABS}


def test_the_status_is_a_live_region_and_empty_answer_frames_stay_hidden(app_url, tmp_path):
    with open_page(app_url, tmp_path / "profile", viewport=DESKTOP) as page:
        region = page.get_by_role("status").filter(has=page.locator(".status"))
        expect(region).to_have_count(1)
        expect(region).to_have_attribute("aria-live", "polite")
        region.evaluate("(el) => { el.dataset.kept = 'yes'; }")  # the same element must carry every later text
        page.set_input_files("#input-image input[type=file]", str(PHOTO))
        page.wait_for_selector("#input-image img")
        page.fill("#query textarea", "the cup on the saucer")
        page.click("#run-btn")
        expect(region).to_contain_text("Running")
        page.wait_for_function("() => (document.querySelector('#live-round .reasoning-text')?.textContent || '')"
                               ".length > 40")
        expect(page.locator("#final-overlay")).to_be_hidden()
        expect(page.locator("#downloads")).to_be_hidden()
        page.click("#stop-btn")
        expect(page.locator("#status .status-cancelled")).to_be_visible(timeout=RUN_MS)
        expect(page.locator("#correct-run-btn")).to_be_visible()  # the stopped run's answer group is shown...
        expect(page.locator("#final-overlay")).to_be_hidden()  # ... without an empty picture frame
        page.screenshot(path=str(SHOTS / "a11y_stopped.png"))

        page.click("#run-btn")
        expect(region).to_contain_text("Done: 1 mask selected after 4 rounds.", timeout=RUN_MS)
        expect(region).to_have_attribute("data-kept", "yes")
        expect(page.locator("#final-overlay img")).to_be_visible()
        expect(page.locator('#downloads a[download="trace.zip"]')).to_be_visible()
        page.screenshot(path=str(SHOTS / "a11y_done.png"))
