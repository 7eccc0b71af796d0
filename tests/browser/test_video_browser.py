"""The Video tab in headless Chromium, at desktop and phone size, as a person uses it: a real clip uploaded, the
keyframe picked on the scrubber, the run (the keyframe's rounds streaming, then the tracking bar, told to a screen
reader in its own live region), a frame scrubbed, fixed in the Correct tab's canvas and tracked again from there, and
the four downloads checked frame by frame against the clip.

Starts ``python app.py --preset tiny --script tests/data/video_script.json``: the tiny random-weight SAM 3, its video
tracker and point model, a scripted VLM. Every step waits for what a person waits for (a status line, a button, a
download), never a fixed time; quick scrubbing is tried with the network slowed down, so a late answer would show.
Screenshots go to ``browser_app.SHOTS``/video_*.png. Skipped only when /usr/bin/chromium is missing.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

if not Path("/usr/bin/chromium").exists():
    pytest.skip("Chromium is not installed at /usr/bin/chromium (CI installs it with apt-get)",
                allow_module_level=True)

import av
import numpy as np
from browser_app import (
    DESKTOP,
    PHONE,
    ROOT,
    RUN_MS,
    SHOTS,
    download,
    has_touch,
    new_page,
    open_browser,
    press,
    running_app,
    show_tab,
    slow_server,
)
from PIL import Image
from playwright.sync_api import Page, expect

from sam3_agent.rle import decode_rle
from sam3_agent.video.saved import load_video_trace_zip

CLIP = ROOT / "sam3_agent" / "assets" / "bigbuckbunny.mp4"  # 50 frames, 480x270, 25 fps
SCRIPT = ROOT / "tests" / "data" / "video_script.json"
FRAMES = 50
KEYFRAME, FIXED = 10, 30
DOWNLOADS = ("masks_palette_png.zip", "tracks_ytvis.json", "video_trace.zip", "overlay.mp4")
# Every text the progress's live region shows, in order, as a screen reader would be handed it.
WATCH_ANNOUNCEMENTS = """
window.__said = [];
new MutationObserver(() => {
  const region = document.querySelector('#video-progress-live [role=status]');  // what a screen reader reads
  const text = region ? region.textContent.trim() : '';
  if (text && window.__said[window.__said.length - 1] !== text) window.__said.push(text);
}).observe(document, {childList: true, subtree: true, characterData: true});
"""


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    args = ("--preset", "tiny", "--script", str(SCRIPT), "--max-rounds", "10")
    with running_app(tmp_path_factory.mktemp("app"), {}, args=args) as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with open_browser(tmp_path_factory.mktemp("chromium-downloads")) as browser:
        yield browser


def status_says(page: Page, text: str, timeout: int | None = None) -> None:
    expect(page.locator("#video-status")).to_contain_text(text, **({"timeout": timeout} if timeout else {}))


def scrub_to(page: Page, frame: int) -> None:
    """Type a frame number in the scrubber's box, as a person who knows the frame does (the slider follows)."""
    box = page.locator("#video-scrubber input[type=number]")
    box.fill(str(frame))
    box.press("Enter")


def frame_src(page: Page) -> str:
    return page.locator("#video-frame img").get_attribute("src") or ""


def edit_the_frame(page: Page) -> None:
    """In the Correct tab: change the object's mask with the canvas tools (a brush stroke with a mouse, a point with
    a finger), as for a photo, and wait until the status says the edit was made."""
    image = page.locator("#correct-canvas img.cv-image")
    page.locator("#correct-canvas .cv-viewport").scroll_into_view_if_needed()
    expect(image).to_be_visible()
    expect(image).to_have_js_property("complete", True)
    box = image.bounding_box()
    width, height = (float(image.get_attribute(a)) for a in ("width", "height"))

    def at(x: float, y: float) -> tuple[float, float]:
        return box["x"] + (x + 0.5) * box["width"] / width, box["y"] + (y + 0.5) * box["height"] / height

    if has_touch(page):
        press(page.locator("#canvas-tool label").filter(has_text="3 Point on (+)"))
        page.touchscreen.tap(*at(160, 120))
    else:
        page.locator("#canvas-tool label").filter(has_text="5 Paint").click()
        page.mouse.move(*at(40, 40))
        page.mouse.down()
        page.mouse.move(*at(120, 40), steps=6)
        page.mouse.up()
    expect(page.locator("#correct-status")).to_contain_text("Last edit:")


def the_whole_flow(page: Page, folder: Path, size: str) -> dict[str, Path]:
    """Upload -> keyframe -> run -> scrub -> fix a frame -> re-propagate -> download; returns the downloads."""
    show_tab(page, "Video", "#video-file")
    page.set_input_files("#video-file input[type=file]", str(CLIP))
    status_says(page, "Clip ready: bigbuckbunny.mp4, 50 frames of 480x270, 25 fps, 2.0 s.")
    expect(page.locator("#video-frame-time")).to_have_text("Frame 0 of 0-49 · 0.00 s")
    first = frame_src(page)
    scrub_to(page, KEYFRAME)  # the keyframe: the agent reasons on it
    expect(page.locator("#video-frame-time")).to_have_text("Frame 10 of 0-49 · 0.40 s")
    assert frame_src(page) != first
    page.locator("#video-query textarea").fill("the rabbit stretching")
    page.screenshot(path=str(SHOTS / f"video_{size}_1_clip.png"), full_page=True)

    press(page.locator("#video-run-btn"))
    expect(page.locator("#video-stop-btn")).to_be_enabled()
    expect(page.locator("#video-rounds section.round")).to_have_count(3, timeout=RUN_MS)  # the keyframe's rounds
    expect(page.locator("#video-progress .video-bar")).to_be_visible()
    status_says(page, "Done: 1 object over 50 frames (keyframe 10, 3 rounds, 49 frames tracked).", RUN_MS)
    region = page.locator("#video-progress-live").get_by_role("status")  # the progress's own live region
    expect(region).to_have_attribute("aria-live", "polite")
    expect(page.locator('#video-objects tr[data-object="1"]')).to_be_visible()
    status_says(page, "Downloads ready.", RUN_MS)
    expect(page.locator("#video-stop-btn")).to_be_disabled()
    page.screenshot(path=str(SHOTS / f"video_{size}_2_result.png"), full_page=True)

    before = frame_src(page)
    with slow_server(page):  # two quick scrubs: the frame shown is the last one asked for
        scrub_to(page, 20)
        scrub_to(page, FIXED)
        expect(page.locator("#video-frame-time")).to_have_text("Frame 30 of 0-49 · 1.20 s")
    assert frame_src(page) != before

    press(page.locator("#video-fix-btn"))
    expect(page.get_by_role("tab", name="Correct", exact=True)).to_have_attribute("aria-selected", "true")
    expect(page.locator("#video-apply-note")).to_contain_text("Frame 30 of bigbuckbunny.mp4: object 1.")
    expect(page.locator("#correct-status")).to_contain_text("Selected: mask 1.")
    edit_the_frame(page)
    page.screenshot(path=str(SHOTS / f"video_{size}_3_fix_in_correct.png"), full_page=True)
    press(page.locator("#video-apply-btn"))
    expect(page.get_by_role("tab", name="Video", exact=True)).to_have_attribute("aria-selected", "true")
    status_says(page, "Fixed object 1 on frame 30 and tracked again over 38 frame(s).", RUN_MS)
    expect(page.locator("#video-scrubber input[type=number]")).to_have_value(str(FIXED))
    expect(page.locator('#video-objects tr[data-object="1"]')).to_contain_text("10, 30")  # its fixed frames
    expect(page.locator("#video-rounds section.round")).to_have_count(3)  # the run's rounds stay
    status_says(page, "Downloads ready.", RUN_MS)
    page.screenshot(path=str(SHOTS / f"video_{size}_4_fixed.png"), full_page=True)
    return {name: download(page, "#video-downloads", name, folder) for name in DOWNLOADS}


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_a_clip_goes_from_upload_through_a_fixed_frame_to_downloads_of_every_frame(browser, app_url, tmp_path, size):
    page = new_page(browser, app_url, {"desktop": DESKTOP, "phone": PHONE}[size], WATCH_ANNOUNCEMENTS)
    try:
        files = the_whole_flow(page, tmp_path, size)
        said = page.evaluate("window.__said")
        if size == "phone":  # nothing on the page is wider than the phone
            assert page.evaluate("document.documentElement.scrollWidth") == PHONE["width"]
    finally:
        page.context.close()
    # what a screen reader was told: quarters and ends, never frame by frame
    tracking = [text for text in said if text.startswith("Tracking")]
    assert tracking and tracking[-1].startswith("Tracking: 49 of 49 frames, done")
    assert all(text.startswith(("Tracking", "Re-propagating", "Writing the overlay video")) for text in said), said
    assert len(tracking) <= 6 and any(text.startswith("Re-propagating: 38 of 38 frames, done") for text in said)

    trace = load_video_trace_zip(files["video_trace.zip"])
    assert trace.clip.frame_count == FRAMES and trace.status == "done"
    assert [(e.kind, e.object_id, e.frame_index) for e in trace.edits] == [("replace", 1, FIXED)]
    with zipfile.ZipFile(files["masks_palette_png.zip"]) as archive:
        assert sorted(archive.namelist()) == [f"masks/{i:05d}.png" for i in range(FRAMES)]
        ids = np.asarray(Image.open(archive.open(f"masks/{FIXED:05d}.png")))
    assert np.array_equal(ids == 1, trace.tracks.mask(1, FIXED))
    document = json.loads(files["tracks_ytvis.json"].read_text())
    assert document["videos"][0]["length"] == FRAMES
    segmentations = document["annotations"][0]["segmentations"]
    assert len(segmentations) == FRAMES
    assert np.array_equal(decode_rle([segmentations[FIXED]])[0].astype(bool), trace.tracks.mask(1, FIXED))
    with av.open(str(files["overlay.mp4"])) as container:
        assert sum(1 for _ in container.decode(video=0)) == FRAMES
