"""Review 3 of the local web chat, from a user's side: a button pressed through another
thread's URL, odd request bodies and thread names, and the page framed by another site."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from accounts_support import remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bridge"))
from gateway_harness import Client, gateway_env, running_gateway, wait_until
from test_web_api import post, raw

JSON_TYPE = b"Content-Type: application/json"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def _live_stop(client: Client, thread: str) -> str:
    """The Stop token of ``thread``'s progress bubble, once it shows."""
    found: list[dict[str, Any]] = []

    async def shown() -> bool:
        found[:] = [c for m in await client.messages(thread) if m.get("live") for c in m["choices"]]
        return bool(found)

    await wait_until(shown, what=f"the progress bubble of {thread} with its Stop")
    return str(found[0]["token"])


async def test_a_button_is_pressed_only_through_its_own_thread(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        # a Stop: pressed through another thread's URL, it stopped this thread's run
        await client.post("own", "hold OWN")
        stop = await _live_stop(client, "own")
        status, body = await client.press("other", stop, "ada")
        assert status == 410, (status, body)
        client.release("OWN")
        answer = (await client.wait_role("own", "assistant"))[0]["text"]
        assert "fake answer to: hold OWN" in answer
        # an approval: the same (in the same conversation: one account to make, not two)
        await client.post("own", "approve")
        prompt = (await client.wait_role("own", "prompt"))[0]
        approve = next(c["token"] for c in prompt["choices"] if c["label"] == "Approve")
        status, body = await client.press("elsewhere", approve, "ada")
        assert status == 410, (status, body)
        assert "not from this thread" in body["text"]
        # through its own thread it still works
        status, body = await client.press("own", approve, "ada")
        assert status == 200, body
        answer = (await client.wait_role("own", "assistant", 2))[1]["text"]
        assert "the tool was approved" in answer


async def test_a_thread_name_ending_in_a_newline_is_a_400(env: dict[str, str]) -> None:
    body = json.dumps({"user": "me", "text": "hi"}).encode()
    async with running_gateway(env) as (_, client):
        for path in ("/api/threads/demo%0A/messages", "/api/threads/demo%0A/choices"):
            status, answer = await raw(client, post(path, body, JSON_TYPE))
            assert status == 400, (path, status, answer)
        assert client.runs() == []


async def test_a_body_that_cannot_be_decoded_is_a_400(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        body = b'{"user":"a","text":"hi"}'  # says gzip, is not
        request = post("/api/threads/gz/messages", body, JSON_TYPE, b"Content-Encoding: gzip")
        status, answer = await raw(client, request)
        assert status == 400, (status, answer)
        assert b"Content-Encoding" in answer
        assert await client.messages("gz") == []


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")
async def test_another_site_cannot_frame_the_chat(env: dict[str, str]) -> None:
    """Clickjacking: a page the person visits frames the chat (their thread and name are in
    the URL) under a decoy and gets the click that approves a pending tool."""
    from playwright.async_api import async_playwright

    async with running_gateway(env) as (app, _client), async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page()
            chat = f"http://127.0.0.1:{app.port}/?thread=demo&user=ada"
            await page.set_content(f'<iframe src="{chat}"></iframe>', wait_until="load")
            (frame,) = [f for f in page.frames if f != page.main_frame]
            assert await frame.locator("#send-button").count() == 0, "the chat showed in a frame"
        finally:
            await browser.close()
