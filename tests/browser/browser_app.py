"""Shared by the browser tests: start ``app.py`` (tiny preset, scripted VLM) and open it in Debian Chromium."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
SCRIPT = ROOT / "tests" / "data" / "ui_script.json"
SHOTS = ROOT / "test-output" / "screenshots"
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
START_TIMEOUT_S = 180


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running_app(log_dir: Path, env_extra: dict[str, str]) -> Iterator[str]:
    """``app.py --preset tiny --script tests/data/ui_script.json`` on a free port; yields its URL."""
    port = free_port()
    log_path = log_dir / "app.log"
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"}
    env.pop("SAM3_AGENT_SCRIPT_PIECE_DELAY", None)
    env.update(env_extra)
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "app.py"), "--preset", "tiny", "--script", str(SCRIPT), "--port", str(port),
             "--max-rounds", "10"],
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


@contextlib.contextmanager
def open_page(url: str, profile: Path, init_script: str | None = None):
    """A Playwright page on ``url`` in headless Chromium (fresh profile, 1600x1000, downloads allowed)."""
    from playwright.sync_api import expect, sync_playwright

    # Actions wait up to 30 s (below); assertions default to 5 s, too short on a 2-core machine that is busy
    # with other work (a first CI run failed waiting 5 s for an overlay that came later).
    expect.set_options(timeout=30_000)

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), args=BROWSER_FLAGS, headless=True,
            viewport={"width": 1600, "height": 1000}, accept_downloads=True,
        )
        try:
            page = context.new_page()
            page.set_default_timeout(30_000)
            if init_script:
                page.add_init_script(init_script)
            page.goto(url)
            page.wait_for_selector("#run-btn")
            yield page
        finally:
            context.close()


def download(page, container: str, name: str, folder: Path) -> Path:
    """Click the link offering the file ``name`` inside ``container`` (a CSS selector); save it as ``folder/name``."""
    with page.expect_download() as info:
        page.locator(f'{container} a[download="{name}"]').click()
    target = folder / name
    info.value.save_as(str(target))
    return target
