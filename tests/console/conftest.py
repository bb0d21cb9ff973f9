"""The console tests' browser: Debian's `chromium` (`.ci/run` installs it), started once
per module and driven by Playwright, which never downloads a browser of its own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from console_support import CHROMIUM


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """The system Chromium, started once for the module."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield browser
        browser.close()
