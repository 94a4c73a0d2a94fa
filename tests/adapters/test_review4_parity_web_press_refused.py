"""Review 4 (parity): the web page's answer to a button the gateway could not take.

Pressed while the gateway's state disk is full, a button is refused with the reason on
every surface: Telegram alerts, Slack says so to the presser, and the web API answers 507
"the gateway's disk is full: this was NOT stored; send it again later". The web page showed
only "error 507": its toast read the answer's ``text``, which only a press the core took
has, and not the ``error`` every refusal carries. It now shows the refusal's reason.

The real gateway and its page in headless Chromium (Debian's), the state directory on a
small tmpfs that is filled (root only).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import full_disk_support as full_disk
from gateway_harness import gateway_env, running_gateway
from test_web_browser import LAUNCH_ARGS

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_a_refused_press_shows_why(env: dict[str, str], tiny_state: Path) -> None:
    from playwright.async_api import async_playwright, expect

    async with running_gateway(env) as (app, client), async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS
        )
        try:
            page = await browser.new_page()
            await page.goto(f"http://127.0.0.1:{app.port}/?thread=full&user=ada")
            await page.fill("#text", "please approve this")
            await page.click("#send-button")
            approve = page.get_by_role("button", name="Approve", exact=True)
            await expect(approve).to_be_visible(timeout=15_000)
            filler = full_disk.fill(tiny_state)
            await full_disk.refuses_writes(client)
            await approve.click()
            await expect(page.locator("#toast")).to_contain_text("disk is full", timeout=10_000)
            filler.unlink()
        finally:
            await browser.close()
