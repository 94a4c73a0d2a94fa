"""The operator view at /ops in headless Chromium (Debian's), driven by Playwright.

Off without ops.token (404); refuses a missing (401) or wrong (403) token; with ?token=
it keeps an HttpOnly SameSite=Strict cookie so links work; lists conversations with the
columns of ``homes list``, named for people (sizes human-readable, yes/no); shows a
conversation's runs and transcript, its Markdown rendered and its HTML escaped, and a run a
person stopped as "stopped by ..." (neutral, not a red error). Screenshots of each page
are left in the test's temporary directory.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from accounts_support import remove_accounts
from browser_support import CHROMIUM, LAUNCH_ARGS, NEEDS_CHROMIUM
from gateway_harness import (
    gateway_env,
    install_fake_runner,
    run_cli,
    running_gateway,
)

from bridge.operators import LIST_COLUMNS, label
from provisioning import naming

TOKEN = "ops-token-for-tests-0123456789"
HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    env = gateway_env(tmp_path / "root", fake_dir, uid_range)
    env.update(install_fake_runner(fake_dir, provider="openai"))  # its runs are unpriced
    yield env
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_ops_is_absent_without_a_token(env: dict[str, str]) -> None:
    async with running_gateway(env) as (app, _client), aiohttp.ClientSession() as s:
        for path in ("/ops", "/ops/c/1", f"/ops?token={TOKEN}"):
            async with s.get(f"http://127.0.0.1:{app.port}{path}") as r:
                assert r.status == 404, path


async def test_ops_refuses_a_missing_or_wrong_token(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_OPS__TOKEN"] = TOKEN
    async with running_gateway(env) as (app, client), aiohttp.ClientSession() as s:
        await client.post("t", "hello")
        await client.wait_role("t", "assistant")
        base = f"http://127.0.0.1:{app.port}"
        for path in ("/ops", "/ops/c/1"):
            async with s.get(base + path) as r:
                assert r.status == 401 and "secret" not in await r.text()
            async with s.get(base + path, headers={"Authorization": "Bearer nope"}) as r:
                assert r.status == 403
            async with s.get(base + path + "?token=nope", allow_redirects=False) as r:
                assert r.status == 403 and "Set-Cookie" not in r.headers
        async with s.get(base + "/ops", cookies={"jazz_bridge_ops": TOKEN}) as r:
            assert r.status == 403  # the cookie holds a derived value, never the token
        async with s.get(base + "/ops", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
            assert r.status == 200
            assert "script-src" not in r.headers["Content-Security-Policy"]
            assert "default-src 'none'" in r.headers["Content-Security-Policy"]
            assert "web:t" in await r.text()


@pytest.mark.browser
@NEEDS_CHROMIUM
async def test_ops_pages_in_a_browser(env: dict[str, str], tmp_path: Path) -> None:
    from playwright.async_api import async_playwright, expect

    env["JAZZ_BRIDGE_OPS__TOKEN"] = TOKEN
    async with running_gateway(env) as (app, client), async_playwright() as pw:
        await client.post("support", "the bot got my thread wrong")
        await client.wait_role("support", "assistant")
        await client.post("hostile", HOSTILE)
        await client.wait_role("hostile", "assistant")
        await client.post("support", "crash")
        await client.wait_role("support", "error")
        base = f"http://127.0.0.1:{app.port}"
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS
        )
        try:
            # without the token: refused, nothing listed
            page = await browser.new_page()
            response = await page.goto(f"{base}/ops")
            assert response is not None and response.status == 401
            await expect(page.locator("body")).not_to_contain_text("web:support")
            wrong = await page.goto(f"{base}/ops?token=wrong")
            assert wrong is not None and wrong.status == 403
            await page.close()

            context = await browser.new_context()
            page = await context.new_page()
            await page.goto(f"{base}/ops?token={TOKEN}")
            assert page.url == f"{base}/ops"  # the token left the address bar
            [cookie] = await context.cookies()
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
            assert cookie["path"] == "/ops" and TOKEN not in cookie["value"]
            headers = page.locator("thead th")
            labels = [label(c) for c in LIST_COLUMNS]
            assert await headers.all_inner_texts() == labels
            rows = page.locator("tbody tr")
            await expect(rows).to_have_count(2)
            support = rows.filter(has_text="web:support")
            cells = await support.locator("td").all_inner_texts()
            row = dict(zip(labels, cells, strict=True))
            assert row["Platform"] == "web"
            assert (row["Runs"], row["Failures"], row["Unpriced runs"]) == ("2", "1", "2")
            assert row["Archived"] == "no"
            assert re.fullmatch(r"[\d.]+ (B|KiB|MiB)", row["Home size"]), row["Home size"]
            size = support.locator("td[title$=' bytes']")
            assert int((await size.get_attribute("title") or "").split()[0]) > 0
            await page.screenshot(path=str(tmp_path / "ops-list.png"))

            # a link works with the cookie alone
            await support.get_by_role("link", name="web:support").click()
            await expect(page.locator("h1")).to_have_text("web:support")
            await expect(page.locator("body")).to_contain_text("/history")
            transcript = page.locator("td.msg")
            await expect(transcript.first).to_have_text("the bot got my thread wrong")
            await expect(page.locator("body")).to_contain_text("fake answer to:")
            runs = page.locator("h2:has-text('Runs') + table tbody tr")
            await expect(runs).to_have_count(2)
            await expect(runs.first).to_contain_text("no_envelope")
            await page.screenshot(path=str(tmp_path / "ops-conversation.png"))

            # user text is shown as text, never run
            await page.goto(f"{base}/ops")
            await page.get_by_role("link", name="web:hostile").click()
            await expect(page.locator("td.msg").first).to_have_text(HOSTILE)
            assert await page.title() != "pwned"
            assert await page.locator("td.msg img, td.msg script").count() == 0

            # a fresh browser with no cookie is refused again
            other = await browser.new_page()
            refused = await other.goto(page.url)
            assert refused is not None and refused.status == 401
        finally:
            await browser.close()


MARKDOWN = (
    "Steps **to try**:\n\n1. run `make`\n2. see [the docs](https://example.org/docs)\n\n"
    "```\nmake test\n```\n\n<b>not bold</b>"
)


@pytest.mark.browser
@NEEDS_CHROMIUM
async def test_a_conversation_page_renders_markdown_and_says_who_stopped_a_run(
    env: dict[str, str], tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright, expect

    env["JAZZ_BRIDGE_OPS__TOKEN"] = TOKEN
    async with running_gateway(env) as (app, client), async_playwright() as pw:
        await client.post("notes", MARKDOWN)
        await client.wait_role("notes", "assistant")
        await client.post("notes", "hold N1")
        stop = await client.live_stop("notes")
        status, body = await client.press("notes", stop, "ada")
        assert status == 200, (status, body)
        await client.wait_role("notes", "error")
        base = f"http://127.0.0.1:{app.port}"
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS
        )
        try:
            page = await browser.new_page()
            await page.goto(f"{base}/ops?token={TOKEN}")
            await page.get_by_role("link", name="web:notes").click()
            await expect(page.locator("h1")).to_have_text("web:notes")
            first = page.locator("td.msg").first
            # Markdown rendered: emphasis, a numbered list, code, a link that leaves safely
            await expect(first.locator("strong")).to_have_text("to try")
            await expect(first.locator("ol li")).to_have_count(2)
            await expect(first.locator("pre code")).to_have_text("make test")
            docs = first.get_by_role("link", name="the docs")
            await expect(docs).to_have_attribute("href", "https://example.org/docs")
            await expect(docs).to_have_attribute("rel", "noopener noreferrer nofollow")
            # its HTML is text, shown as written
            await expect(first).to_contain_text("<b>not bold</b>")
            assert await first.locator("b").count() == 0
            # the stopped run: who stopped it and how, neutral; its reply not a red error
            runs = page.locator("h2:has-text('Runs') + table tbody tr")
            await expect(runs.first).to_contain_text("stopped by ada (Stop button)")
            await expect(runs.first).not_to_contain_text("SIGTERM")
            outcome = runs.first.locator("td.stopped")
            await expect(outcome).to_have_text("stopped by ada (Stop button)")
            red = "rgb(255, 240, 240)"
            color = await outcome.evaluate("e => getComputedStyle(e).backgroundColor")
            assert color != red, color
            stopped = page.locator("td.role-stopped")
            await expect(stopped).to_have_count(1)
            await expect(page.locator("td.role-error")).to_have_count(0)
            color = await stopped.evaluate("e => getComputedStyle(e).backgroundColor")
            assert color != red, color
            await page.screenshot(path=str(tmp_path / "ops-markdown-and-stop.png"), full_page=True)

            # archived: the page names the archive file and how to restore it, no home path
            done = await asyncio.to_thread(run_cli, env, "homes", "archive", "web:notes")
            assert done.returncode == 0, done.stdout + done.stderr
            home = Path(env["JAZZ_BRIDGE_ROOT"]) / "chats" / naming.home_name("web:notes")
            assert not home.exists()
            await page.reload()
            body = page.locator("body")
            await expect(body).to_contain_text("This home is archived")
            await expect(body).to_contain_text("jazz-bridge homes restore web:notes")
            await expect(body).to_contain_text(".tar.gz")
            await expect(body).not_to_contain_text(str(home))
            await page.screenshot(path=str(tmp_path / "ops-archived.png"), full_page=True)
        finally:
            await browser.close()
