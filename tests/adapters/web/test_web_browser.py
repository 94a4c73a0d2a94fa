"""The web chat page in headless Chromium (Debian's), driven by Playwright, the real gateway
in process: send a message, see progress, press an approval button, read the answer; the
page refused without the token when one is set, and never shown in another site's frame
(clickjacking); an empty thread says what to try; a message the gateway did NOT store (it
stops, its disk is full) stays in the text box, not lost; a refused press shows why (the
refusal's reason, not "error 507").

A file the agent sent shows as a link with its name (never the server's path) and an image
as a preview, loaded from the chat's own origin only; with ``web.token`` set the page asks
for the token (not "error 401"), says a wrong one so, and keeps the login in a cookie with
the token gone from the address bar; a run's summary line is in its answer's bubble. An
image a person attaches with the 📎 button shows as a preview in their own bubble.

The full-disk test puts the state directory on a small tmpfs that is filled (root only)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import aiohttp
import full_disk_support as full_disk
import pytest
from accounts_support import remove_accounts
from browser_support import BROWSER, chromium_page
from files_runner import png
from web_support import SENT_FILES, files_sent, gateway_env, running_gateway, use_files_runner

pytestmark = BROWSER


WEB_TOKEN = "s3cret-token-0123456789"
TYPED = "a long message I do not want to type twice"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_send_see_progress_approve_and_read_the_answer(
    env: dict[str, str], tmp_path: Path
) -> None:
    from playwright.async_api import expect

    async with running_gateway(env) as (app, _client), chromium_page() as page:
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


async def test_an_empty_thread_says_what_to_try(env: dict[str, str], tmp_path: Path) -> None:
    """A new thread shows what it is and things to try; a click puts one in the box (nothing
    sent until the person sends it), and the hint is gone once the thread has a message."""
    from playwright.async_api import expect

    async with running_gateway(env) as (app, client), chromium_page() as page:
        await page.goto(f"http://127.0.0.1:{app.port}/?thread=fresh&user=ada")
        hint = page.locator(".hint")
        await expect(hint).to_contain_text("Nothing in thread \u201cfresh\u201d yet")
        await page.screenshot(path=str(tmp_path / "empty.png"))
        await hint.get_by_role("button", name="What can you do?").click()
        await expect(page.locator("#text")).to_have_value("What can you do?")
        assert await client.messages("fresh") == []  # a click alone sends nothing
        await page.click("#send-button")
        await expect(page.locator(".msg.assistant")).to_contain_text(
            "fake answer to: What can you do?", timeout=15_000
        )
        await expect(hint).to_have_count(0)


async def test_the_page_refuses_without_the_token_when_one_is_set(
    env: dict[str, str],
) -> None:

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


async def test_another_site_cannot_frame_the_chat(env: dict[str, str]) -> None:
    """Clickjacking: a page the person visits frames the chat (their thread and name are in
    the URL) under a decoy and gets the click that approves a pending tool."""
    async with running_gateway(env) as (app, _client), chromium_page() as page:
        chat = f"http://127.0.0.1:{app.port}/?thread=demo&user=ada"
        await page.set_content(f'<iframe src="{chat}"></iframe>', wait_until="load")
        (frame,) = [f for f in page.frames if f != page.main_frame]
        assert await frame.locator("#send-button").count() == 0, "the chat showed in a frame"


async def test_a_message_refused_while_the_gateway_stops_stays_in_the_box(
    env: dict[str, str],
) -> None:
    from playwright.async_api import expect

    async with running_gateway(env) as (app, client), chromium_page() as page:
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


async def test_a_refused_press_shows_why(env: dict[str, str], tiny_state: Path) -> None:
    from playwright.async_api import expect

    async with running_gateway(env) as (app, client), chromium_page() as page:
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


async def test_an_image_sent_with_a_message_shows_as_a_preview(
    env: dict[str, str], tmp_path: Path
) -> None:
    """The 📎 button picks a file; sent with the message, it is saved into the home and the
    person's own bubble links it (its name, never a path) and previews the image."""
    from playwright.async_api import expect

    root = env["JAZZ_BRIDGE_ROOT"]
    async with running_gateway(env) as (app, client), chromium_page() as page:
        await page.goto(f"http://127.0.0.1:{app.port}/?thread=upload&user=ada")
        await expect(page.get_by_role("button", name="Attach files")).to_be_visible()
        await page.set_input_files(
            "#file", files=[{"name": "photo.png", "mimeType": "image/png", "buffer": png()}]
        )
        await expect(page.locator("#chosen")).to_have_text("📎 photo.png")
        await page.fill("#text", "what is in this picture?")
        await page.click("#send-button")
        await expect(page.locator(".msg.assistant")).to_contain_text(
            "fake answer to: what is in this picture?", timeout=20_000
        )
        preview = page.locator(".msg.user img.preview")
        await expect(preview).to_have_count(1, timeout=20_000)
        await expect(preview).to_have_attribute("alt", "photo.png")
        await page.wait_for_function(
            "() => document.querySelector('.msg.user img.preview').naturalWidth === 24",
            timeout=10_000,
        )
        await expect(page.locator(".msg.user .file a")).to_have_text("📎 photo.png")
        await expect(page.locator("#chosen")).to_have_text("")  # sent: the choice is cleared
        html = await page.content()
        assert root not in html, "the page names the server's path"
        await page.screenshot(path=str(tmp_path / "upload.png"))
    (start,) = client.starts("web:upload")
    assert "-photo.png" in start["prompt"], start["prompt"]


async def test_a_file_shows_as_a_link_and_an_image_as_a_preview(
    env: dict[str, str], fake_dir: Path, tmp_path: Path
) -> None:
    from playwright.async_api import expect

    use_files_runner(env, fake_dir)
    root = env["JAZZ_BRIDGE_ROOT"]
    async with running_gateway(env) as (app, client), chromium_page() as page:
        await page.goto(f"http://127.0.0.1:{app.port}/?thread=files&user=ada")
        await page.fill("#text", "make some files")
        await page.click("#send-button")
        links = page.locator(".msg .file a")
        await expect(links).to_have_count(len(SENT_FILES), timeout=20_000)
        names = sorted(await links.all_inner_texts())
        assert names == sorted(f"📎 {n.rsplit('/', 1)[-1]}" for n in SENT_FILES), names
        preview = page.locator(".msg img.preview")
        await expect(preview).to_have_count(1)  # the PNG only: no SVG, no page shown inline
        await expect(preview).to_have_attribute("alt", "plot.png")
        await page.wait_for_function(
            "() => document.querySelector('img.preview').naturalWidth === 24", timeout=10_000
        )
        text = await page.locator("body").inner_text()
        html = await page.content()
        assert root not in text and root not in html, "the page names the server's path"
        assert "workspace/" not in text, text  # the base name only
        await page.screenshot(path=str(tmp_path / "files.png"))
        # a file that is not an image is a download, not a page of the chat's origin
        async with page.expect_download() as download:
            await page.get_by_role("link", name="📎 page.html").click()
        assert (await download.value).suggested_filename == "page.html"
        assert not await page.evaluate("document.title === 'ran'")
        # the preview comes from the chat's origin only: another one is refused by its CSP
        other = f"http://localhost:{app.port}" + (await files_sent(client, "files"))[0]["fileUrl"]
        refused = await page.evaluate(
            """(src) => new Promise((done) => {
                 document.addEventListener("securitypolicyviolation",
                   (e) => done(e.violatedDirective), {once: true});
                 const img = document.createElement("img");
                 img.onload = () => done("loaded");
                 img.src = src; document.body.appendChild(img);
               })""",
            other,
        )
        assert refused == "img-src", refused
        # and another site's page cannot show it either (no token: loopback is trusted)
        own = f"http://127.0.0.1:{app.port}" + (await files_sent(client, "files"))[0]["fileUrl"]
        # another origin (a page of this server without a CSP, under another name)
        await page.goto(f"http://localhost:{app.port}/healthz")
        loaded = await page.evaluate(
            """(src) => new Promise((done) => {
                 const img = document.createElement("img");
                 img.onload = () => done("loaded"); img.onerror = () => done("refused");
                 img.src = src; document.body.appendChild(img);
               })""",
            own,
        )
        assert loaded == "refused", loaded


async def test_the_page_asks_for_the_token_then_keeps_a_cookie_and_a_clean_url(
    env: dict[str, str], tmp_path: Path
) -> None:
    from playwright.async_api import expect

    env["JAZZ_BRIDGE_WEB__TOKEN"] = WEB_TOKEN
    async with running_gateway(env) as (app, _client), chromium_page() as page:
        base = f"http://127.0.0.1:{app.port}"
        await page.goto(f"{base}/?thread=login&user=ada")
        form = page.locator("#login")
        await expect(form).to_be_visible(timeout=10_000)
        assert "401" not in await page.locator("body").inner_text()
        await expect(page.locator("#send")).to_be_hidden()
        await page.screenshot(path=str(tmp_path / "login.png"))
        await page.fill("#login-token", "not the token")
        await page.click("#login-button")
        await expect(page.locator("#login-error")).to_contain_text("Wrong token")
        await page.screenshot(path=str(tmp_path / "login-wrong.png"))
        await page.fill("#login-token", WEB_TOKEN)
        await page.click("#login-button")
        await expect(form).to_be_hidden()
        await expect(page.locator("#state")).to_have_text("connected", timeout=10_000)
        await page.fill("#text", "hello after login")
        await page.click("#send-button")
        await expect(page.locator(".msg.assistant")).to_contain_text(
            "fake answer to: hello after login", timeout=15_000
        )
        (cookie,) = await page.context.cookies()
        assert cookie["name"] == "jazz_bridge_web" and cookie["httpOnly"], cookie
        assert cookie["sameSite"] == "Strict" and WEB_TOKEN not in cookie["value"], cookie
        assert WEB_TOKEN not in page.url
        # a link with the token: logged in, the token gone from the address bar
        await page.context.clear_cookies()
        await page.goto(f"{base}/?thread=login&token={WEB_TOKEN}&user=ada")
        assert page.url == f"{base}/?thread=login&user=ada", page.url
        await expect(page.locator(".msg.assistant")).to_contain_text("hello after login")
        await page.screenshot(path=str(tmp_path / "login-by-link.png"))
        # a link with a wrong one: the form says so, and the address bar keeps no trace
        await page.context.clear_cookies()
        await page.goto(f"{base}/?thread=login&token=wrong")
        await expect(page.locator("#login-error")).to_contain_text("Wrong token")
        assert page.url == f"{base}/?thread=login", page.url


async def test_the_summary_line_is_in_the_answers_bubble(
    env: dict[str, str], tmp_path: Path
) -> None:
    from playwright.async_api import expect

    long = "hold LONG " + "tell me everything about this, at length. " * 60
    async with running_gateway(env) as (app, client), chromium_page() as page:
        await page.goto(f"http://127.0.0.1:{app.port}/?thread=summary&user=ada")
        await page.fill("#text", long)
        await page.click("#send-button")
        await expect(page.locator(".msg.status[data-live='1']")).to_be_visible(timeout=15_000)
        client.release("LONG")
        answer = page.locator(".msg.assistant")
        await expect(answer).to_contain_text("fake answer to: hold LONG", timeout=15_000)
        await expect(answer.locator(".summary")).to_contain_text("✓", timeout=15_000)
        await expect(page.locator(".msg.status")).to_have_count(0)
        await page.screenshot(path=str(tmp_path / "summary.png"), full_page=True)
