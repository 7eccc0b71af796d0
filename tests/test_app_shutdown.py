"""``app.py`` stopped with a plain SIGTERM (docker stop, a Space restarting) leaves no files behind: Gradio's cache
(uploads, served results) and the app's own download folder are removed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import ASSETS

ROOT = Path(__file__).resolve().parent.parent  # the checkout: app.py and tests/data
pytestmark = pytest.mark.slow  # starts app.py (tiny models) in a process of its own


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_sigterm_removes_the_gradio_cache_and_the_apps_own_folder(tmp_path):
    from gradio_client import Client, handle_file

    temp, cache = tmp_path / "tmp", tmp_path / "gradio"
    temp.mkdir()
    port = free_port()
    env = {**os.environ, "TMPDIR": str(temp), "GRADIO_TEMP_DIR": str(cache), "GRADIO_ANALYTICS_ENABLED": "False"}
    log = open(tmp_path / "app.log", "w")
    process = subprocess.Popen(
        [sys.executable, "app.py", "--preset", "tiny", "--script", "tests/data/ui_script.json", "--port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 300
        while True:  # wait for what a user waits for: the page answering
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "app.log").read_text()
                time.sleep(0.5)
        client = Client(url, verbose=False, download_files=str(tmp_path / "downloads"))
        client.predict(handle_file(str(ASSETS / "coffee.jpg")), "the cup", api_name="/segment")
        assert list(temp.glob("sam3_agent_app_*/api/*/trace.zip"))  # the app's own download folder
        assert [p for p in cache.rglob("*") if p.is_file()]  # Gradio's copy of the upload and of the results
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
    assert list(temp.glob("sam3_agent_app_*")) == []
    assert [p for p in cache.rglob("*") if p.is_file()] == []
