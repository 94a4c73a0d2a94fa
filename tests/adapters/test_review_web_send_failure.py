"""Review: a message the gateway did NOT store must not vanish from the web chat's box.

The page empties the text box before the POST and never puts the text back: when the
gateway answers that it did not store the message (503 while it stops or restarts, 507 on
a full disk: "it was NOT stored; try again") or cannot be reached at all, what the person
typed is gone, with a toast of 2.5 s (or, when the fetch fails, nothing at all) as the only
trace. They have to type it again from memory.
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
TYPED = "a long message I do not want to type twice"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_a_message_refused_while_the_gateway_stops_stays_in_the_box(
    env: dict[str, str],
) -> None:
    from playwright.async_api import async_playwright, expect

    async with running_gateway(env) as (app, client), async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS
        )
        try:
            page = await browser.new_page()
            await page.goto(f"http://127.0.0.1:{app.port}/?thread=lost&user=ada")
            await expect(page.locator("#state")).to_have_text("connected", timeout=15_000)
            # the first step of GatewayApp.stop(): intake closes (a restart, an upgrade)
            assert app.engine is not None
            app.engine.stopping = True
            await page.fill("#text", TYPED)
            async with page.expect_response(lambda r: r.request.method == "POST") as answer:
                await page.click("#send-button")
            assert (await answer.value).status == 503  # "NOT stored; try again shortly"
            await expect(page.locator("#toast")).to_contain_text("shutting down", timeout=5_000)
            assert await client.messages("lost") == []  # really not stored
            await expect(page.locator("#text")).to_have_value(TYPED, timeout=2_000)
        finally:
            await browser.close()
