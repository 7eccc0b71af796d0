"""Shared by the browser tests: start ``app.py`` (tiny preset, scripted VLM) and open it in Debian Chromium.

The tests wait for what a person waits for (an element visible, enabled and still, a status line saying so), never
a fixed time, so they pass on a busy 2-core machine. Screenshots and measurements go to a temporary folder
(``$SAM3_AGENT_TEST_OUTPUT`` or ``<system temp>/sam3_agent_test_output``), never into the repository.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
SCRIPT = ROOT / "tests" / "data" / "ui_script.json"
OUTPUT = Path(os.environ.get("SAM3_AGENT_TEST_OUTPUT") or Path(tempfile.gettempdir()) / "sam3_agent_test_output")
SHOTS = OUTPUT / "screenshots"
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
START_TIMEOUT_S = 300  # app.py loading the tiny models on a busy machine
WAIT_MS = 90_000  # the longest any single step may take on a busy machine before the test gives up
RUN_MS = 300_000  # the longest a whole scripted run may take there (its first reply alone streams for 17 s)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


TINY_ARGS = ("--preset", "tiny", "--script", str(SCRIPT), "--max-rounds", "10")


@contextlib.contextmanager
def running_app(log_dir: Path, env_extra: dict[str, str], args: tuple[str, ...] = TINY_ARGS) -> Iterator[str]:
    """``app.py`` with ``args`` (default: ``--preset tiny --script tests/data/ui_script.json``) on a free port; yields
    its URL."""
    port = free_port()
    log_path = log_dir / "app.log"
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"}
    env.pop("SAM3_AGENT_SCRIPT_PIECE_DELAY", None)
    env.update(env_extra)
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "app.py"), *args, "--port", str(port)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"app.py did not start; its log:\n{log_path.read_text()[-4000:]}")
            time.sleep(0.5)
    try:
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}


@contextlib.contextmanager
def open_browser(downloads: Path | None = None):
    """Headless Debian Chromium (one per test module: Playwright runs one at a time per thread); ``downloads``: the
    folder its downloads land in. Open pages in it with ``new_page``."""
    from playwright.sync_api import expect, sync_playwright

    # Actions and assertions wait up to WAIT_MS for their condition (Playwright's own 5 s default is too short on
    # a 2-core machine that is busy with other work); a step that is ready goes on at once.
    expect.set_options(timeout=WAIT_MS)
    SHOTS.mkdir(parents=True, exist_ok=True)
    if downloads:
        downloads.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_FLAGS, headless=True,
                                             downloads_path=str(downloads) if downloads else None)
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser, url: str, viewport: dict[str, int] | None = None, init_script: str | None = None):
    """A page on ``url`` in a fresh context of ``browser`` (``viewport`` default 1600x1000; a phone's size also gets
    touch, so ``tap`` works, and a mobile user agent), downloads allowed; closing the page's context is the caller's."""
    size = viewport or {"width": 1600, "height": 1000}
    phone = size["width"] < 600
    context = browser.new_context(viewport=size, accept_downloads=True, is_mobile=phone, has_touch=phone)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    if init_script:
        page.add_init_script(init_script)
    page.goto(url)
    page.wait_for_selector("#run-btn")
    return page


@contextlib.contextmanager
def open_page(url: str, profile: Path, init_script: str | None = None, viewport: dict[str, int] | None = None):
    """A Playwright page on ``url`` in headless Chromium (``new_page``: fresh context, ``viewport`` default 1600x1000,
    a phone's size with touch); ``profile``: the folder the browser's downloads land in. ``page.context.browser``
    opens more contexts (another size) in the same browser."""
    with open_browser(profile) as browser:
        page = new_page(browser, url, viewport, init_script)
        try:
            yield page
        finally:
            page.context.close()


SLOW_SERVER_MS = 1500  # added to every request while ``slow_server`` holds: longer than two scripted clicks take


@contextlib.contextmanager
def slow_server(page) -> Iterator[None]:
    """Every request the page sends answers ``SLOW_SERVER_MS`` later (Chromium's network emulation), so input given
    while an event is pending is given while it is pending, on a quiet machine as on a busy one."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": SLOW_SERVER_MS,
                                                   "downloadThroughput": -1, "uploadThroughput": -1})
    try:
        yield
    finally:
        cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": 0,
                                                       "downloadThroughput": -1, "uploadThroughput": -1})
        cdp.detach()


def ready(locator):
    """Wait until a person could act on ``locator``: visible, enabled, not moving and not covered (Playwright's
    checks before a click, without clicking), e.g. before acting on it with the mouse at computed coordinates."""
    locator.click(trial=True)
    return locator


def has_touch(page) -> bool:
    """True when the page is a touch screen's (a phone's size in ``new_page``)."""
    return bool(page.evaluate("navigator.maxTouchPoints > 0"))


def press(locator) -> None:
    """What a person does to press ``locator``: tap it on a touch screen, click it elsewhere."""
    if has_touch(locator.page):
        locator.tap()
    else:
        locator.click()


def show_tab(page, name: str, panel: str) -> None:
    """Bring tab ``name`` to the front (tapped on a touch screen) and wait until its panel (CSS selector) is shown."""
    from playwright.sync_api import expect

    press(page.get_by_role("tab", name=name, exact=True))
    expect(page.get_by_role("tab", name=name, exact=True)).to_have_attribute("aria-selected", "true")
    expect(page.locator(panel)).to_be_visible()


def download(page, container: str, name: str, folder: Path) -> Path:
    """Click the link offering the file ``name`` inside ``container`` (a CSS selector); save it as ``folder/name``."""
    with page.expect_download() as info:
        page.locator(f'{container} a[download="{name}"]').click()
    target = folder / name
    info.value.save_as(str(target))
    return target


CONTRAST = """
(el) => {
  // WCAG contrast of an element's text against what is behind it: colours blended with every ancestor's opacity
  // and the first opaque background up the tree (white when none).
  const parse = (c) => (c.match(/[0-9.]+/g) || [0, 0, 0, 0]).map(Number);
  let [r, g, b, a] = parse(getComputedStyle(el).color);
  if (a === undefined) a = 1;
  let alpha = a;
  for (let n = el; n; n = n.parentElement) alpha *= Number(getComputedStyle(n).opacity);
  let back = [255, 255, 255];
  for (let n = el; n; n = n.parentElement) {
    const [br, bg, bb, ba] = parse(getComputedStyle(n).backgroundColor);
    if (ba === undefined || ba > 0.5) { back = [br, bg, bb]; break; }
  }
  const text = [r, g, b].map((v, i) => v * alpha + back[i] * (1 - alpha));
  const lum = (rgb) => { const s = rgb.map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * s[0] + 0.7152 * s[1] + 0.0722 * s[2]; };
  const [hi, lo] = [lum(text), lum(back)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}
"""


def contrast(page, selector: str) -> float:
    """The WCAG contrast ratio of the first element matching ``selector`` (see ``CONTRAST``)."""
    return float(page.locator(selector).first.evaluate(CONTRAST))


def in_view(page, selector: str) -> bool:
    """True when the element is wholly inside the browser window as it is scrolled now."""
    box = page.locator(selector).first.bounding_box()
    size = page.viewport_size
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= size["height"] and box["x"] >= 0 \
        and box["x"] + box["width"] <= size["width"]
