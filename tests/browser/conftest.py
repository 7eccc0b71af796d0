"""Every test in this folder drives the app in headless Chromium: marked ``browser`` (``-m "not browser"`` skips
them for a fast run)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(item.fspath).resolve().parents:
            item.add_marker(pytest.mark.browser)
