"""The local web chat's API (adapters/web/adapter.py), the real gateway in process: against
what another web page could make a browser do (a form, a no-cors fetch, another origin, DNS
rebinding), input a client library would never send (raw bytes over a socket: odd
charsets, half a surrogate pair, a thread name ending in a newline, a body that says gzip
and is not), a button pressed through another thread's URL, the token given in any case of
its scheme, and event streams (refused while the gateway stops; one that ended leaves
nothing behind per thread name); the files a thread was sent, served from its own home
only (never another thread's, never through ``..``, an absolute path or a link planted in
the home; an image inline, anything else an attachment); the page's login with the
token (a form's POST or ``?token=``: a cookie, then a clean URL)."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from accounts_support import remove_accounts
from web_support import (
    JSON_TYPE,
    SENT_FILES,
    Client,
    files_sent,
    gateway_env,
    post,
    raw,
    running_gateway,
    use_files_runner,
    wait_until,
)

from bridge.http.login import LOGIN_FAILURES_ALLOWED, without_token
from provisioning import naming
from provisioning.layout import Layout

OPS_TOKEN = "ops-token-for-the-web-api-tests"
WEB_TOKEN = "web-token-for-the-review-0123456789"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range, JAZZ_BRIDGE_OPS__TOKEN=OPS_TOKEN)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_another_site_cannot_post_or_read_through_a_browser(env: dict[str, str]) -> None:
    body = json.dumps({"user": "me", "text": "from another site"}).encode()
    path = "/api/threads/demo/messages"
    async with running_gateway(env) as (_, client):
        # a form or a no-cors fetch from another page: not JSON, so no preflight was needed
        plain = post(path, body, b"Content-Type: text/plain;charset=UTF-8")
        assert (await raw(client, plain))[0] == 415
        form = post(path, b"user=me&text=x", b"Content-Type: application/x-www-form-urlencoded")
        assert (await raw(client, form))[0] == 415
        # JSON that names another origin
        foreign = post(
            path, body, b"Content-Type: application/json", b"Origin: http://evil.example"
        )
        assert (await raw(client, foreign))[0] == 403
        # DNS rebinding: the attacker's name resolving to 127.0.0.1
        rebound = b"GET /api/threads/demo/messages HTTP/1.1\r\nHost: attacker.example\r\n"
        assert (await raw(client, rebound + b"Connection: close\r\n\r\n"))[0] == 421
        # a message is stored before its answer: none of those was (nor run)
        assert await client.messages("demo") == []
        assert client.runs() == []
        # the page itself: same origin, JSON
        own = post(path, body, b"Content-Type: application/json", b"Origin: http://127.0.0.1")
        assert (await raw(client, own))[0] == 202
        await client.wait_role("demo", "assistant")
        users = [m["text"] for m in await client.messages("demo") if m["role"] == "user"]
        assert users == ["from another site"]
        assert len(client.starts("web:demo")) == 1


async def test_bad_input_is_a_clear_400_never_a_500(env: dict[str, str]) -> None:
    path = "/api/threads/bad/messages"
    json_type = b"Content-Type: application/json"
    async with running_gateway(env) as (_, client):
        cases = [
            post(path, b'{"user":"a","text":"b"}', b"Content-Type: application/json; charset=nope"),
            post(path, b'{"user":"a","text":"x\\ud800"}', json_type),
            post(path, b'{"user":"\\ud800","text":"hi"}', json_type),
            post(path, b'{"user":"a","text":"hi"}', json_type, b"Idempotency-Key: \xff\xfe"),
            post("/api/threads/bad/choices", b'{"user":"a","token":"\\ud800"}', json_type),
        ]
        for request in cases:
            status, answer = await raw(client, request)
            assert status == 400, (request, status, answer)
        ops = [
            b"GET /ops HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \xff\r\n",
            b"GET /ops/c/99999999999999999999 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {OPS_TOKEN}\r\n".encode(),
        ]
        statuses = [(await raw(client, r + b"Connection: close\r\n\r\n"))[0] for r in ops]
        assert statuses == [403, 404]
        assert await client.messages("bad") == []  # stored before any answer: none was
        assert client.runs() == []


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


async def test_a_button_is_pressed_only_through_its_own_thread(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        # a Stop: pressed through another thread's URL, it stopped this thread's run
        await client.post("own", "hold OWN")
        stop = await client.live_stop("own")
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


async def test_a_settled_prompt_says_which_choice_was_made(env: dict[str, str]) -> None:
    """Read back after its press, an approval says Approved or Rejected, not only that it
    was answered (a person scrolling back sees what was chosen)."""
    async with running_gateway(env) as (_, client):
        for n, (label, note, verdict) in enumerate(
            [("Approve", "✅ approved", "approved"), ("Reject", "❌ rejected", "rejected")], 1
        ):
            await client.post("chosen", "approve")
            prompt = (await client.wait_role("chosen", "prompt", n))[n - 1]
            token = next(c["token"] for c in prompt["choices"] if c["label"] == label)
            status, body = await client.press("chosen", token, "ada")
            assert status == 200, body
            answer = (await client.wait_role("chosen", "assistant", n))[n - 1]["text"]
            assert f"the tool was {verdict}" in answer, answer
            shown = [m for m in await client.messages("chosen") if m["role"] == "prompt"][n - 1]
            assert shown["text"].endswith(f"_{note}_"), shown["text"]
            assert not shown["choices"], shown


async def test_the_bearer_scheme_is_case_insensitive(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_WEB__TOKEN"] = WEB_TOKEN
    async with running_gateway(env) as (_, client):
        url = f"{client.base}/api/threads/t/messages"
        for scheme in ("Bearer", "bearer", "BEARER"):
            headers = {"Authorization": f"{scheme} {WEB_TOKEN}"}
            async with client.session.get(url, headers=headers) as r:
                assert r.status == 200, (scheme, r.status, await r.text())
        async with client.session.get(url, headers={"Authorization": "bearer wrong"}) as r:
            assert r.status == 401


async def test_event_streams_opened_while_stopping_are_refused(env: dict[str, str]) -> None:
    async with running_gateway(env) as (app, client):
        (web,) = [a for a in app.adapters if a.name == "web"]
        await web.stop()  # the gateway's stop path, first step
        get = b"GET /api/threads/t/events HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        status, _ = await raw(client, get)
        assert status == 503  # a browser's EventSource does not reconnect after this


async def _open_and_drop(port: int, thread: str) -> None:
    """Open the event stream of ``thread``, read its first line, hang up."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"GET /api/threads/{thread}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b": connected\n\n"), 10)
        assert b" 200 " in head.split(b"\r\n", 1)[0]
    finally:
        writer.close()


async def test_closed_event_streams_leave_no_entry_per_thread(env: dict[str, str]) -> None:
    async with running_gateway(env) as (app, client):
        (web,) = [a for a in app.adapters if a.name == "web"]
        listeners = web.surface.listeners  # type: ignore[attr-defined]
        threads = [f"probe-{secrets.token_hex(4)}-{i}" for i in range(20)]
        for thread in threads:
            await _open_and_drop(app.port, thread)
        # every stream has noticed its client is gone (at the latest at its heartbeat)
        await wait_until(
            lambda: all(not listeners.get(t) for t in threads),
            timeout=40,
            what="the dropped streams to end",
        )
        left = [t for t in threads if t in listeners]
        assert left == [], f"{len(left)} of {len(threads)} thread names stay in memory: {left[:3]}"
        # and nothing was stored for any of them: the names cost memory only
        for thread in threads[:2]:
            assert await client.messages(thread) == []


# -- the files a thread was sent -----------------------------------------------------------------


@pytest.fixture
def files_env(env: dict[str, str], fake_dir: Path) -> dict[str, str]:
    use_files_runner(env, fake_dir)
    return env


def _home(env: dict[str, str], thread: str) -> Path:
    return Layout(Path(env["JAZZ_BRIDGE_ROOT"])).home(naming.home_name(f"web:{thread}"))


async def _get(client: Client, url: str, **kw: Any) -> tuple[int, dict[str, str], bytes]:
    async with client.session.get(client.base + url, **kw) as r:
        return r.status, dict(r.headers), await r.read()


async def test_a_file_the_thread_was_sent_is_served_from_its_home(
    files_env: dict[str, str],
) -> None:
    """An image inline, a page, an SVG and text as attachments, all with nosniff; named
    relative to the home (base name and link for the page), never by the server's path."""
    root = files_env["JAZZ_BRIDGE_ROOT"]
    async with running_gateway(files_env) as (_, client):
        await client.post("files", "make some files")
        sent = {m["file"]: m for m in await files_sent(client, "files")}
        assert sorted(sent) == sorted(f"workspace/{n}" for n in SENT_FILES), sent
        assert root not in json.dumps(await client.messages("files"))
        home = _home(files_env, "files")
        served = {}
        for name, m in sent.items():
            assert m["fileName"] == name.rsplit("/", 1)[-1], m
            status, headers, body = await _get(client, m["fileUrl"])
            assert status == 200, (name, status, body)
            assert body == (home / name).read_bytes(), name
            assert headers["X-Content-Type-Options"] == "nosniff", headers
            served[name] = (headers["Content-Type"], headers["Content-Disposition"], m["preview"])
    png_type, png_disposition, png_preview = served["workspace/plot.png"]
    assert png_type == "image/png" and png_disposition.startswith("inline;") and png_preview
    for name in ("page.html", "drawing.svg", "notes.txt", "sub/deep.txt"):
        _, disposition, preview = served[f"workspace/{name}"]
        assert disposition.startswith("attachment;"), (name, disposition)
        assert not preview, name
    assert served["workspace/page.html"][0] == "text/html"
    assert served["workspace/drawing.svg"][0] == "image/svg+xml"


async def test_the_file_route_serves_nothing_else(files_env: dict[str, str]) -> None:
    """Not a file the thread was not sent (another thread's, one of its home the agent did
    not send, the gateway's database), not through ``..`` or an absolute path (a 400 that
    says so), not through a link planted in the home, whose answer names no server path."""
    root = files_env["JAZZ_BRIDGE_ROOT"]
    async with running_gateway(files_env) as (_, client):
        await client.post("files", "make some files")
        await files_sent(client, "files")
        await client.post("other", "nothing to make")
        await client.wait_role("other", "assistant")
        home = _home(files_env, "files")
        url = "/api/threads/{}/files?path={}"
        bad = {
            url.format("files", f"{home}/workspace/plot.png"): 400,  # absolute
            url.format("files", "workspace/../workspace/plot.png"): 400,
            url.format("files", "../../state/bridge.db"): 400,
            url.format("files", "workspace/sub/..%2F..%2Fworkspace/plot.png"): 400,
            url.format("files", ""): 400,
            url.format("files", "workspace/secret.txt"): 404,  # in the home, never sent
            url.format("other", "workspace/plot.png"): 404,  # another thread's file
            url.format("nobody", "workspace/plot.png"): 404,  # no such conversation
        }
        for asked, expected in bad.items():
            status, _, body = await _get(client, asked)
            assert status == expected, (asked, status, body)
            assert root not in body.decode(), (asked, body)
        assert b"absolute" in (await _get(client, url.format("files", f"{home}/x")))[2]
        assert b"'..'" in (await _get(client, url.format("files", "../x")))[2]
        # a link planted in the home: the file replaced by one, a directory by one
        (home / "workspace/notes.txt").unlink()
        (home / "workspace/notes.txt").symlink_to("/etc/hostname")
        (home / "workspace/sub").rename(home / "workspace/real-sub")
        (home / "workspace/sub").symlink_to(home / "workspace/real-sub")
        for name in ("workspace/notes.txt", "workspace/sub/deep.txt"):
            status, _, body = await _get(client, url.format("files", name))
            assert status == 404, (name, status, body)
            assert b"cannot be served" in body and root not in body.decode(), body
        # the image is still served: the refusals are the links', not the route's
        assert (await _get(client, url.format("files", "workspace/plot.png")))[0] == 200


async def test_the_file_route_needs_the_token(files_env: dict[str, str]) -> None:
    files_env["JAZZ_BRIDGE_WEB__TOKEN"] = WEB_TOKEN
    bearer = {"Authorization": f"Bearer {WEB_TOKEN}"}
    async with running_gateway(files_env) as (_, client):
        async with aiohttp.ClientSession(headers=bearer) as session:
            owner = Client(client.base, session, client.fake_dir)
            await owner.post("files", "make some files")
            url = (await files_sent(owner, "files"))[0]["fileUrl"]
        assert (await _get(client, url))[0] == 401
        assert (await _get(client, url, headers={"Authorization": "Bearer wrong"}))[0] == 401
        assert (await _get(client, url, headers=bearer))[0] == 200
        login = {"jazz_bridge_web": "99999999999.forged"}
        assert (await _get(client, url, cookies=login))[0] == 401
        async with _browser() as s:
            async with s.post(f"{client.base}/login", json={"token": WEB_TOKEN}) as r:
                assert r.status == 204, await r.text()
            async with s.get(client.base + url) as r:  # the session keeps the login cookie
                assert r.status == 200


# -- the page's login with the token ----------------------------------------------------------


def _browser() -> aiohttp.ClientSession:
    """A session that keeps cookies as a browser does (for 127.0.0.1 too)."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def test_the_page_logs_in_with_the_token_and_drops_it_from_the_url(
    env: dict[str, str],
) -> None:
    env["JAZZ_BRIDGE_WEB__TOKEN"] = WEB_TOKEN
    async with running_gateway(env) as (_, client):
        base = client.base
        async with _browser() as s:
            async with s.get(f"{base}/?thread=t") as r:  # the page loads: it asks for the token
                assert r.status == 200 and "login-token" in await r.text()
            async with s.get(f"{base}/api/threads/t/messages") as r:
                assert r.status == 401
            async with s.post(f"{base}/login", json={"token": "wrong"}) as r:
                assert r.status == 403 and "wrong token" in (await r.json())["error"]
            async with s.post(f"{base}/login", data=WEB_TOKEN) as r:  # a form, not JSON
                assert r.status == 415
            async with s.get(f"{base}/?thread=t&token=wrong", allow_redirects=False) as r:
                assert r.status == 303, r.status
                assert r.headers["Location"] == "/?thread=t&login=wrong"
                assert "Set-Cookie" not in r.headers
            assert not s.cookie_jar.filter_cookies(base)  # type: ignore[arg-type]
            async with s.get(f"{base}/?thread=t&token={WEB_TOKEN}", allow_redirects=False) as r:
                assert r.status == 303
                assert r.headers["Location"] == "/?thread=t"
                flags = {p.strip().lower() for p in r.headers["Set-Cookie"].split(";")}
                assert "httponly" in flags and "samesite=strict" in flags and "path=/" in flags
                assert WEB_TOKEN not in r.headers["Set-Cookie"]
            async with s.get(f"{base}/api/threads/t/messages") as r:
                assert r.status == 200, await r.text()
        async with _browser() as s:  # the form's way
            async with s.post(f"{base}/login", json={"token": WEB_TOKEN}) as r:
                assert r.status == 204
            async with s.get(f"{base}/api/threads/t/messages") as r:
                assert r.status == 200
        # an /ops cookie with the same token is not a login of the chat
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{base}/ops?token={OPS_TOKEN}", allow_redirects=False) as r:
                ops = r.cookies["jazz_bridge_ops"].value
            async with s.get(
                f"{base}/api/threads/t/messages", cookies={"jazz_bridge_web": ops}
            ) as r:
                assert r.status == 401


@pytest.mark.parametrize("secure", [True, False])
async def test_the_login_cookie_is_secure_when_configured(
    env: dict[str, str], secure: bool
) -> None:
    """Behind a TLS-terminating proxy the gateway sees plain http: ``web.secure_cookie``
    marks the page's login Secure all the same (as ``ops.secure_cookie`` does for /ops)."""
    env["JAZZ_BRIDGE_WEB__TOKEN"] = WEB_TOKEN
    env["JAZZ_BRIDGE_WEB__SECURE_COOKIE"] = str(secure).lower()
    async with running_gateway(env) as (_, client), _browser() as s:
        async with s.post(f"{client.base}/login", json={"token": WEB_TOKEN}) as form:
            assert form.status == 204
            by_form = form.headers["Set-Cookie"]
        link = f"{client.base}/?token={WEB_TOKEN}"
        async with s.get(link, allow_redirects=False) as r:
            assert r.status == 303
            by_link = r.headers["Set-Cookie"]
    for cookie in (by_form, by_link):
        flags = {part.strip().lower() for part in cookie.split(";")}
        assert ("secure" in flags) is secure, cookie
        assert "httponly" in flags and "samesite=strict" in flags, cookie


def _token_failures(text: str) -> float:
    """``jazz_bridge_auth_failures_total{platform="web",reason="token"}`` in ``text``."""
    line = 'jazz_bridge_auth_failures_total{platform="web",reason="token"} '
    return next((float(x.split()[-1]) for x in text.splitlines() if x.startswith(line)), 0.0)


async def test_wrong_tokens_are_limited_per_address_and_the_right_one_is_not(
    env: dict[str, str],
) -> None:
    """Ten wrong tokens a minute from one address, given any way (the form, the link, a
    bearer); then every token from it is 429 with Retry-After, the right one too (else the
    answers would tell a guesser when it hit), each counted as a token failure. Right
    tokens never count: logging in again and again is never limited; a minute after the
    wrong ones the right token logs in again."""
    env["JAZZ_BRIDGE_WEB__TOKEN"] = WEB_TOKEN
    async with running_gateway(env) as (app, client), _browser() as s:
        (web,) = [a for a in app.adapters if a.name == "web"]
        failures = web._auth.failures  # type: ignore[attr-defined]
        now = [1000.0]
        failures.clock = lambda: now[0]
        base = client.base
        for _ in range(LOGIN_FAILURES_ALLOWED + 5):  # right ones are never counted
            async with s.post(f"{base}/login", json={"token": WEB_TOKEN}) as r:
                assert r.status == 204
        wrong = "not-the-web-token-0123456789"
        for n in range(LOGIN_FAILURES_ALLOWED):
            if n % 3 == 0:
                async with s.post(f"{base}/login", json={"token": wrong}) as r:
                    assert r.status == 403, (n, r.status)
            elif n % 3 == 1:
                async with s.get(f"{base}/?token={wrong}", allow_redirects=False) as r:
                    assert r.status == 303 and "login=wrong" in r.headers["Location"]
            else:
                headers = {"Authorization": f"Bearer {wrong}"}
                async with s.get(f"{base}/api/threads/t/messages", headers=headers) as r:
                    assert r.status == 401, (n, r.status)
            now[0] += 1
        for token in (wrong, WEB_TOKEN):
            async with s.post(f"{base}/login", json={"token": token}) as r:
                assert r.status == 429, (token, r.status)
                assert int(r.headers["Retry-After"]) == 60 - LOGIN_FAILURES_ALLOWED
                assert "too many wrong tokens" in (await r.json())["error"]
        bearer = {"Authorization": f"Bearer {WEB_TOKEN}"}
        async with s.get(f"{base}/api/threads/t/messages", headers=bearer) as r:
            assert r.status == 429 and "Retry-After" in r.headers
        async with s.get(f"{base}/?token={WEB_TOKEN}", allow_redirects=False) as r:
            assert r.status == 429
        # the login the browser already has is no token given: it keeps working
        async with s.get(f"{base}/api/threads/t/messages") as r:
            assert r.status == 200
        async with s.get(f"{base}/metrics") as r:
            counted = _token_failures(await r.text())
        assert counted == LOGIN_FAILURES_ALLOWED + 4, counted  # the wrong ones, then the 429s
        now[0] += 60  # the first wrong one is a minute old: one try is back
        async with s.post(f"{base}/login", json={"token": WEB_TOKEN}) as r:
            assert r.status == 204, r.status


def test_a_redirect_without_the_token_keeps_the_rest_of_the_query() -> None:
    from aiohttp.test_utils import make_mocked_request

    request = make_mocked_request("GET", "/?thread=a%20b&token=x&login=wrong&user=u")
    assert without_token(request, {}, drop=("login",)).headers["Location"] == (
        "/?thread=a+b&user=u"
    )


# -- the summary line with its answer ---------------------------------------------------------


async def test_a_runs_summary_line_goes_with_its_answer(env: dict[str, str]) -> None:
    """A run long enough to show its bubble turns it into the summary line when it ends:
    once the answer is in, the line is the answer's (``summary``), not a bubble above it;
    before, it stays a bubble (nothing is lost while the answer is on its way)."""
    long = "hold SUM " + "a long question that makes a long answer " * 60
    async with running_gateway(env) as (_, client):
        await client.post("sum", long)
        await client.live_stop("sum")  # the bubble shows, with its Stop
        client.release("SUM")
        (answer,) = await client.wait_role("sum", "assistant")
        assert "fake answer to: hold SUM" in answer["text"]

        async def merged() -> bool:
            messages = await client.messages("sum")
            return any(m.get("summary") for m in messages)

        await wait_until(merged, what="the summary line with the answer")
        messages = await client.messages("sum")
    (with_line,) = [m for m in messages if m.get("summary")]
    assert with_line["role"] == "assistant" and with_line["replyId"] == answer["replyId"]
    assert with_line["summary"].startswith("✓ "), with_line["summary"]
    assert not [m for m in messages if m.get("live")], messages  # no bubble of its own
    assert [m["role"] for m in messages] == ["user", "assistant"], messages


def test_a_downloaded_file_keeps_its_name_in_any_script() -> None:
    from adapters.web.files import disposition

    assert disposition('workspace/résumé "final".txt', inline=False) == (
        'attachment; filename="r_sum_ _final_.txt"; '
        "filename*=UTF-8''r%C3%A9sum%C3%A9%20%22final%22.txt"
    )
    assert disposition("workspace/plot.png", inline=True).startswith('inline; filename="plot.png"')
