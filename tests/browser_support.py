"""Debian's Chromium for the browser tests (the web chat's page, the /ops pages): where it
is, how it is started headless (Playwright drives it and downloads nothing), and the marks
that skip a test where it is not installed."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
NEEDS_CHROMIUM = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"
)
BROWSER = [pytest.mark.browser, NEEDS_CHROMIUM]


@contextlib.asynccontextmanager
async def chromium_page() -> AsyncIterator[Any]:
    """A page of a headless Chromium of its own, closed with its browser on the way out."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS
        )
        try:
            yield await browser.new_page()
        finally:
            await browser.close()
