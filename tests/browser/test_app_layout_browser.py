"""The app as people use it, in headless Chromium on a desktop (1440x900) and a phone (390x844): the answer in view
after Run without scrolling, Stop offered only while there is a run, why messages were dropped (the whole list in the
page on a phone), a timeline click in Inspect, zoom and a key in Correct, upload boxes clear of their labels (on both);
Stop on a run still waiting in the queue and Run pressed again during a run; the first start of an app whose models
are missing (on both).

Starts ``python app.py --preset tiny --script tests/data/ui_script.json`` (and, for the first start, ``python app.py``
offline with an empty Hugging Face cache). Every step waits for what a person waits for (a tab in front, a status
line), never a fixed time, so it passes on a busy machine. Screenshots go to ``browser_app.SHOTS``/layout_*.png (a
temporary folder). Skipped only when /usr/bin/chromium is missing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

if not Path("/usr/bin/chromium").exists():
    pytest.skip("Chromium is not installed at /usr/bin/chromium (CI installs it with apt-get)",
                allow_module_level=True)

from browser_app import DESKTOP, PHONE, ROOT, RUN_MS, SHOTS, download, in_view, open_page, running_app, show_tab
from playwright.sync_api import Page, expect

from sam3_agent.trace.io import load_trace

PHOTO = ROOT / "sam3_agent" / "assets" / "coffee.jpg"
# the script's first reply (349 words) streams for about 17 s: time to press Run or Stop again, and to queue a second
# run from another tab, even on a busy machine
PIECE_DELAY = "0.05"
SIZES = {"desktop": DESKTOP, "phone": PHONE}


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    with running_app(tmp_path_factory.mktemp("app"), {"SAM3_AGENT_SCRIPT_PIECE_DELAY": PIECE_DELAY}) as url:
        yield url


def fill_in(page: Page, query: str) -> None:
    page.set_input_files("#input-image input[type=file]", str(PHOTO))
    page.wait_for_selector("#input-image img")
    page.fill("#query textarea", query)


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_after_run_the_status_and_then_the_answer_are_in_view_without_scrolling(app_url, tmp_path, size):
    with open_page(app_url, tmp_path / "profile", viewport=SIZES[size]) as page:
        expect(page.locator("#model-notice")).to_contain_text("Demo mode:")  # random weights, scripted replies
        stop = page.locator("#stop-btn")
        expect(stop).to_be_disabled()  # nothing to stop yet
        fill_in(page, "the cup on the saucer")
        page.locator("#run-btn").click()
        expect(page.locator("#status")).to_contain_text("Running")
        expect(stop).to_be_enabled()
        page.wait_for_function("() => (document.querySelector('#live-round .reasoning-text')?.textContent || '')"
                               ".length > 40")
        assert in_view(page, "#status") and in_view(page, "#live-round .round-head")  # progress is seen at once
        page.screenshot(path=str(SHOTS / f"layout_{size}_1_running.png"))
        expect(page.locator("#status")).to_contain_text("Done: 1 mask selected after 4 rounds.", timeout=RUN_MS)
        expect(page.locator("#final-overlay img")).to_be_visible()
        expect(stop).to_be_disabled()  # the run has ended: nothing to stop again
        page.screenshot(path=str(SHOTS / f"layout_{size}_2_answer.png"))
        assert in_view(page, "#status") and in_view(page, "#final-overlay img"), page.evaluate("window.scrollY")
        # the newest round comes first, right under the answer
        assert page.locator("#rounds section.round").first.get_attribute("data-round") == "4"

        # the context panel says why messages were dropped (on a phone it comes after the rounds)
        run = page.locator("#context-panel details.ctx-run")
        run.scroll_into_view_if_needed()
        expect(run.locator(":scope > summary")).to_contain_text(
            "2 messages dropped (#2 to #3): before the latest segment_phrase")
        page.locator("#context-panel").screenshot(path=str(SHOTS / f"layout_{size}_3_context.png"))
        messages = page.locator("#context-panel .ctx-scroll")
        if size == "phone":  # the whole list is in the page: no box inside the scrolling page cuts it off
            assert messages.evaluate("e => e.scrollHeight - e.clientHeight") <= 1
        else:  # a long list scrolls in its own box, whose bottom edge is drawn
            assert messages.evaluate("e => getComputedStyle(e).borderBottomStyle") == "solid"

        # Inspect: the timeline opens a round
        trace_path = download(page, "#downloads", "trace.zip", tmp_path)
        show_tab(page, "Inspect a trace", "#trace-file")
        page.set_input_files("#trace-file input[type=file]", str(trace_path))
        row = page.locator('#timeline tr[data-round="3"]')
        row.locator("td").nth(1).click()
        expect(page.locator('#inspect-round section.round[data-round="3"]')).to_be_visible()
        expect(page.locator("#inspect-round .verdict-card")).to_have_count(1)
        page.screenshot(path=str(SHOTS / f"layout_{size}_4_timeline.png"), full_page=True)

        # Correct: zoom with the canvas button, then a tool by its key
        show_tab(page, "Run", "#correct-run-btn")
        page.click("#correct-run-btn")
        # the canvas may be drawn seconds before the tab comes to the front on a busy machine: wait for both
        expect(page.get_by_role("tab", name="Correct", exact=True)).to_have_attribute("aria-selected", "true")
        expect(page.locator("#correct-canvas .cv-viewport")).to_be_visible()
        level = page.locator("#correct-canvas .cv-level")
        expect(level).to_have_text(re.compile(r"^[0-9]+%$"))
        fitted = int(level.inner_text().rstrip("%"))
        page.locator('#correct-canvas [data-zoom="in"]').click()
        expect(level).not_to_have_text(f"{fitted}%")
        assert 1.2 <= int(level.inner_text().rstrip("%")) / fitted <= 1.3  # one step: x1.25 (levels are rounded)
        page.keyboard.press("3")
        expect(page.locator("#canvas-tool input[type=radio]").nth(2)).to_be_checked()
        page.locator("#correct-canvas").screenshot(path=str(SHOTS / f"layout_{size}_5_correct_zoomed.png"))
        assert_upload_clear_of_its_label(page, "#correct-file")
        assert page.locator("#correct-download").bounding_box()["height"] <= 120  # empty: one line, not a frame
        show_tab(page, "Review a batch", "#review-zip")
        assert_upload_clear_of_its_label(page, "#review-zip")
        page.locator("#review-zip").screenshot(path=str(SHOTS / f"layout_{size}_6_review_upload.png"))


def assert_upload_clear_of_its_label(page: Page, box: str) -> None:
    """The upload box ``box``: its icon starts below its floating label and its text ends inside the box (in a
    110 px box both ran under the label and out of the box)."""
    label, icon, text, frame = page.locator(box).evaluate("""(box) => [
        box.querySelector('[data-testid=block-label]'), box.querySelector('[data-testid=upload-icon]'),
        box.querySelector('[data-testid=upload-text]'), box].map((e) => {
            const r = e.getBoundingClientRect(); return [r.top, r.bottom]; })""")
    assert label[1] <= icon[0], (box, label, icon)
    assert text[1] <= frame[1] + 0.5, (box, text, frame)


def test_stop_withdraws_a_run_still_waiting_in_the_queue(app_url, tmp_path):
    with open_page(app_url, tmp_path / "profile", viewport=DESKTOP) as first:
        second = first.context.new_page()  # another tab: another Gradio session
        second.goto(app_url)
        second.wait_for_selector("#run-btn")
        fill_in(first, "the cup on the saucer")
        first.click("#run-btn")
        expect(first.locator("#status")).to_contain_text("Running")  # the model now serves this one
        fill_in(second, "the saucer")
        second.click("#run-btn")
        expect(second.locator("#status")).to_contain_text("Queued: waiting for the model")
        second.click("#stop-btn")
        expect(second.locator("#status .status-cancelled")).to_have_text(
            "Stopped before it started: the run was still waiting in the queue.")
        second.screenshot(path=str(SHOTS / "layout_queued_stopped.png"))
        expect(first.locator("#status")).to_contain_text("Done:", timeout=RUN_MS)
        # a run pressed after the withdrawn one can only start once the queue has dealt with that one
        first.click("#run-btn")
        expect(first.locator("#status")).to_contain_text("Running", timeout=RUN_MS)
        expect(second.locator("#status .status-cancelled")).to_have_text(
            "Stopped before it started: the run was still waiting in the queue.")
        expect(second.locator("#rounds section.round")).to_have_count(0)
        expect(second.locator("#live-round section")).to_have_count(0)
        first.click("#stop-btn")
        expect(first.locator("#status .status-cancelled")).to_be_visible()


def test_run_pressed_during_a_run_stops_it_and_runs_the_new_query(app_url, tmp_path):
    with open_page(app_url, tmp_path / "profile", viewport=DESKTOP) as page:
        fill_in(page, "the first query")
        page.click("#run-btn")
        page.wait_for_function("() => (document.querySelector('#live-round .reasoning-text')?.textContent || '')"
                               ".length > 20")
        page.fill("#query textarea", "the second query")
        # every text the status line shows from now on: "Stopping..." lasts only until the first run has ended,
        # which on an idle machine can be quicker than a poll of the status
        page.evaluate("""() => {
            const status = document.querySelector('#status');
            window.__statusSeen = [status.textContent];
            new MutationObserver(() => window.__statusSeen.push(status.textContent))
                .observe(status, {childList: true, subtree: true, characterData: true});
        }""")
        page.click("#run-btn")
        expect(page.locator("#status")).to_contain_text("Done: 1 mask selected after 4 rounds.", timeout=RUN_MS)
        page.screenshot(path=str(SHOTS / "layout_run_during_run.png"))
        seen = [" ".join(text.split()) for text in page.evaluate("window.__statusSeen")]
        stopping = [n for n, text in enumerate(seen)
                    if "Stopping the current run: the new one starts as soon as it has ended." in text]
        stopped = [n for n, text in enumerate(seen) if "Stopped after" in text]
        assert stopping and stopped and stopping[0] < stopped[0], seen
        trace = load_trace(download(page, "#downloads", "trace.zip", tmp_path))
        assert trace.query == "the second query" and trace.status == "done"


@pytest.fixture(scope="module")
def app_without_models(tmp_path_factory):
    """``python app.py`` (real models) on a machine that has never downloaded them: offline, empty Hub cache."""
    folder = tmp_path_factory.mktemp("no_models")
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(folder / "hf_home")}
    with running_app(folder, env, args=()) as url:
        yield url


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_a_first_start_without_models_says_once_what_is_missing_and_keeps_run_off(app_without_models, tmp_path, size):
    with open_page(app_without_models, tmp_path / "profile", viewport=SIZES[size]) as page:
        notice = page.locator("#model-notice")
        expect(notice).to_contain_text("Run is off: the models are not on this machine yet.")
        expect(notice.locator("li")).to_have_count(2)
        expect(notice.locator("li").first).to_contain_text("SAM 3: facebook/sam3 (not downloaded yet). It is gated")
        expect(notice.locator("li").nth(1)).to_contain_text("VLM: Qwen/Qwen3-VL-8B-Instruct (not downloaded yet).")
        expect(notice).to_contain_text("hf auth login")
        expect(notice).to_contain_text("python app.py --preset tiny --script sam3_agent/assets/example_script.json")
        expect(page.locator("#run-btn")).to_be_disabled()
        expect(page.locator("#status")).to_have_text("Run is off until the models load.")
        assert page.get_by_text("not on this machine").count() == 1  # one message, not three
        expect(page.locator(".toast-body")).to_have_count(0)
        assert in_view(page, "#model-notice b")
        page.screenshot(path=str(SHOTS / f"layout_{size}_first_start.png"), full_page=True)
