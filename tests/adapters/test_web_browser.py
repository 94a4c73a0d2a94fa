"""The web chat page in headless Chromium (Debian's), driven by Playwright.

Send a message, see progress, press an approval button, see the answer.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bridge"))
from gateway_harness import gateway_env, running_gateway

WEB_TOKEN = "s3cret-token-0123456789"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_send_see_progress_approve_and_read_the_answer(
    env: dict[str, str], tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright, expect

    async with running_gateway(env) as (app, _client), async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS
        )
        try:
            page = await browser.new_page()
            await page.goto(f"http://127.0.0.1:{app.port}/?thread=browser&user=ada")
            await page.fill("#text", "please approve this")
            await page.click("#send-button")
            await expect(page.locator(".msg.user")).to_contain_text("please approve this")
            # the run waits for the approval: the progress bubble shows it still working
            await expect(page.locator(".msg.status[data-live='1']")).to_contain_text(
                "waiting for you", timeout=15_000
            )
            approve = page.get_by_role("button", name="Approve", exact=True)
            await expect(approve).to_be_visible(timeout=15_000)
            await page.screenshot(path=str(tmp_path / "prompt.png"))
            await approve.click()
            await expect(page.locator(".msg.assistant")).to_contain_text(
                "the tool was approved", timeout=15_000
            )
            await page.screenshot(path=str(tmp_path / "answer.png"))
        finally:
            await browser.close()


async def test_the_page_refuses_without_the_token_when_one_is_set(
    env: dict[str, str],
) -> None:
    import aiohttp

    env["JAZZ_BRIDGE_WEB__TOKEN"] = WEB_TOKEN
    async with running_gateway(env) as (app, _client):
        base = f"http://127.0.0.1:{app.port}"
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{base}/api/threads/x/messages") as r:
                assert r.status == 401
            async with s.post(
                f"{base}/api/threads/x/messages", json={"user": "a", "text": "b"}
            ) as r:
                assert r.status == 401
            async with s.get(
                f"{base}/api/threads/x/messages", headers={"Authorization": f"Bearer {WEB_TOKEN}"}
            ) as r:
                assert r.status == 200
