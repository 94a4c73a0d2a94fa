"""Debian's Chromium for the browser tests (the web chat's page, the /ops pages): where it
is, how it is started headless (Playwright drives it and downloads nothing), and the marks
that skip a test where it is not installed."""

from __future__ import annotations

import shutil
from pathlib import Path

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
