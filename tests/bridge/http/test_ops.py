"""The operators' view at /ops (``bridge/http/ops.py``): its login behind a proxy that asks
for a password, how long the login cookie lasts and when it is Secure, and what a page
shows of a failed run (the provider key a runner quoted, masked).

Behind a TLS-terminating proxy the gateway sees plain http, so the login cookie was never
marked Secure: a browser would send it over any http link to the same host. With
``ops.secure_cookie`` it is; without it, a plain http login keeps working. The real
gateway in process, or the real ``jazz-bridge serve``; the web chat.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from accounts_support import remove_accounts
from faults_support import serve
from gateway_harness import gateway_env, run_cli, running_gateway, wait_until

from bridge.http.login import LOGIN_FAILURES_ALLOWED
from bridge.runner.command import shared_interpreter
from provisioning import naming

TOKEN = "ops-token-for-the-tests-0123456789"
# what nginx's auth_basic passes on to the gateway with every request (alice:pw)
PROXY_BASIC = {"Authorization": "Basic YWxpY2U6cHc="}
MAX_COOKIE_AGE_S = 24 * 3600
COOKIE = "jazz_bridge_ops"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range, JAZZ_BRIDGE_OPS__TOKEN=TOKEN)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def _login(s: aiohttp.ClientSession, base: str, **headers: str) -> aiohttp.ClientResponse:
    async with s.get(f"{base}/ops?token={TOKEN}", allow_redirects=False, headers=headers) as r:
        return r


async def test_ops_works_behind_a_proxy_that_asks_for_a_password(env: dict[str, str]) -> None:
    async with running_gateway(env) as (app, _), aiohttp.ClientSession() as s:
        base = f"http://127.0.0.1:{app.port}"
        login = await _login(s, base, **PROXY_BASIC)
        assert login.status == 303, login.status
        cookie = login.cookies["jazz_bridge_ops"].value
        cookies = {"jazz_bridge_ops": cookie}
        async with s.get(f"{base}/ops", headers=PROXY_BASIC, cookies=cookies) as r:
            assert r.status == 200, (r.status, await r.text())
        # "bearer" is the same scheme as "Bearer" (RFC 7235: case-insensitive)
        async with s.get(f"{base}/ops", headers={"Authorization": f"bearer {TOKEN}"}) as r:
            assert r.status == 200, (r.status, await r.text())


async def test_the_login_cookie_expires(env: dict[str, str]) -> None:
    async with running_gateway(env) as (app, _), aiohttp.ClientSession() as s:
        base = f"http://127.0.0.1:{app.port}"
        login = await _login(s, base)
        morsel = login.cookies["jazz_bridge_ops"]
        assert morsel["httponly"] and morsel["samesite"] == "Strict"
        age = morsel["max-age"]
        assert age and 0 < int(age) <= MAX_COOKIE_AGE_S, f"the cookie never expires: {morsel}"
        # its holder cannot make it last longer: the expiry it carries is signed
        value = morsel.value
        later = re.sub(r"^\d+", lambda m: str(int(m.group()) + 10 * MAX_COOKIE_AGE_S), value)
        assert later != value
        async with s.get(f"{base}/ops", cookies={"jazz_bridge_ops": later}) as r:
            assert r.status == 403
        async with s.get(f"{base}/ops", cookies={"jazz_bridge_ops": value}) as r:
            assert r.status == 200


async def test_a_cookie_from_yesterday_asks_for_the_token_again(env: dict[str, str]) -> None:
    from bridge.http.ops import COOKIE_TTL_S, LOGIN

    issued = time.time() - COOKIE_TTL_S - 60  # a login of more than its lifetime ago
    old = LOGIN.value(TOKEN.encode(), issued)
    async with running_gateway(env) as (app, _), aiohttp.ClientSession() as s:
        url = f"http://127.0.0.1:{app.port}/ops"
        async with s.get(url, cookies={COOKIE: old}) as r:
            status, text = r.status, await r.text()
    assert status == 401, status
    assert "/ops?token=" in text


async def _set_cookie(env: dict[str, str]) -> str:
    async with running_gateway(env) as (app, _), aiohttp.ClientSession() as s:
        url = f"http://127.0.0.1:{app.port}/ops?token={TOKEN}"
        async with s.get(url, allow_redirects=False) as login:
            assert login.status == 303, login.status
            return login.headers["Set-Cookie"]


@pytest.mark.parametrize("secure", [True, False])
async def test_the_login_cookie_is_secure_when_configured(
    env: dict[str, str], secure: bool
) -> None:
    env["JAZZ_BRIDGE_OPS__SECURE_COOKIE"] = str(secure).lower()
    cookie = await _set_cookie(env)
    flags = {part.strip().lower() for part in cookie.split(";")}
    assert ("secure" in flags) is secure, cookie
    assert "httponly" in flags and "samesite=strict" in flags, cookie


async def test_wrong_operator_tokens_are_limited_per_address(env: dict[str, str]) -> None:
    """/ops shares the web chat's login code, and its limit: ten wrong tokens a minute from
    one address (as a bearer or ``?token=``), then 429 with Retry-After for every token,
    the right one too; the login cookie already given keeps working."""
    async with running_gateway(env) as (app, _), aiohttp.ClientSession() as s:
        base = f"http://127.0.0.1:{app.port}"
        login = await _login(s, base)
        cookies = {COOKIE: login.cookies[COOKIE].value}
        for n in range(LOGIN_FAILURES_ALLOWED):
            if n % 2:
                async with s.get(f"{base}/ops?token=wrong", allow_redirects=False) as r:
                    assert r.status == 403, (n, r.status)
            else:
                async with s.get(f"{base}/ops", headers={"Authorization": "Bearer no"}) as r:
                    assert r.status == 403, (n, r.status)
        for url, headers in (
            (f"{base}/ops?token={TOKEN}", {}),
            (f"{base}/ops", {"Authorization": f"Bearer {TOKEN}"}),
        ):
            async with s.get(url, headers=headers, allow_redirects=False) as r:
                assert r.status == 429, (url, r.status)
                assert 1 <= int(r.headers["Retry-After"]) <= 60
                assert "too many wrong tokens" in await r.text()
        async with s.get(f"{base}/ops", cookies=cookies) as r:
            assert r.status == 200, r.status


# -- what a page shows of a failed run -------------------------------------------------------


PROVIDER_KEY = "sk-opstest-7d1e9a3c5b2f4e6a8c0d"


# A runner whose provider refused its key, and which says so in its envelope's error.
FAILING_RUNNER = """\
import json, os, sys
sys.stdin.readline()
key = os.environ.get("OPENAI_API_KEY", "(none)")
print(json.dumps({"ok": False, "code": "provider_error",
                  "error": "401 from the provider: invalid api key " + key}))
"""


async def test_the_ops_page_masks_a_key_quoted_in_a_run_error(
    env: dict[str, str], tmp_path: Path, fake_dir: Path
) -> None:
    """A run's provider key (``runner.extra_env``, every value a secret) quoted in the error
    a runner reports is masked in the chat's reply and in the log; the /ops page, served
    over HTTP to whoever holds the ops token, showed the stored error as the runner wrote
    it."""
    runner = fake_dir / "failing_runner.py"
    runner.write_text(FAILING_RUNNER)
    runner.chmod(0o755)
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])
    extra = json.loads(env["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"])
    env["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"] = json.dumps({**extra, "OPENAI_API_KEY": PROVIDER_KEY})
    async with serve(env, tmp_path) as (_, client):
        await client.post("keyed", "hello")
        (reply,) = await client.wait_role("keyed", "error")
        assert "invalid api key" in reply["text"]
        assert PROVIDER_KEY not in reply["text"]  # the chat's reply: masked already
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with client.session.get(f"{client.base}/ops", headers=auth) as r:
            assert r.status == 200
            listing = await r.text()
        (link,) = re.findall(r'href="(/ops/c/\d+)"', listing)
        async with client.session.get(f"{client.base}{link}", headers=auth) as r:
            assert r.status == 200
            page = await r.text()
    assert "invalid api key" in page  # the run's error is shown...
    assert PROVIDER_KEY not in page, "the ops page shows the provider key of a failed run"
    # ... and stored masked (homes show, --json included, prints it from there)
    with sqlite3.connect(tmp_path / "root" / "state" / "bridge.db") as conn:
        errors = [row[0] for row in conn.execute("SELECT error FROM runs")]
    assert errors and all("invalid api key" in e for e in errors)
    assert not [e for e in errors if PROVIDER_KEY in e], "the run's record keeps the key"


# -- what an operator reads: Markdown rendered safely, columns named for people, a Stop ------


MARKDOWN = (
    "**bold** and `code`\n\n- one\n- two\n\n"
    "[site](https://example.org/x) [js](javascript:alert(1)) [here](/ops/c/1) "
    "![pic](https://example.org/p.png)\n\n"
    '<b>raw</b> <script>alert(1)</script> <a href="javascript:alert(2)">a</a>'
)


async def _page(client: Any, path: str) -> str:
    async with client.session.get(
        f"{client.base}{path}", headers={"Authorization": f"Bearer {TOKEN}"}
    ) as r:
        assert r.status == 200, (r.status, await r.text())
        return str(await r.text())


async def _conversation_page(client: Any, thread: str) -> str:
    listing = await _page(client, "/ops")
    link = re.search(rf'<a href="(/ops/c/\d+)">web:{re.escape(thread)}</a>', listing)
    assert link is not None, listing
    return await _page(client, link.group(1))


def _message_cells(page: str) -> list[str]:
    return re.findall(r"<td class=msg>(.*?)</td>\s*</tr>", page, re.S)


async def test_a_transcript_s_markdown_is_rendered_and_nothing_of_its_html(
    env: dict[str, str],
) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("md", MARKDOWN)
        await client.wait_role("md", "assistant")
        page = await _conversation_page(client, "md")
    cell = _message_cells(page)[0]
    # rendered: emphasis, code, a list, a web link that opens nothing of the page's
    assert "<strong>bold</strong>" in cell and "<code>code</code>" in cell, cell
    assert "<li>one</li>" in cell and "<li>two</li>" in cell, cell
    assert '<a href="https://example.org/x" rel="noopener noreferrer nofollow">site</a>' in cell
    # any other address stays text: no javascript:, no link into the gateway's own pages
    assert re.findall(r'href="([^"]*)"', cell) == [
        "https://example.org/x",
        "https://example.org/p.png",
    ], cell
    assert "[js](javascript:alert(1))" in cell and "[here](/ops/c/1)" in cell, cell
    # an image is a link to it, never loaded
    assert "<img" not in page
    assert 'href="https://example.org/p.png"' in cell and "image: pic" in cell, cell
    # the text's own HTML is text
    assert "&lt;b&gt;raw&lt;/b&gt;" in cell and "&lt;script&gt;alert(1)&lt;/script&gt;" in cell
    assert "<script" not in page and "<b>" not in page
    assert "&lt;a href=&quot;javascript:alert(2)&quot;&gt;" in cell, cell


async def test_the_ops_columns_are_named_for_people(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("cols", "hello")
        await client.wait_role("cols", "assistant")
        listing = await _page(client, "/ops")
        page = await _conversation_page(client, "cols")
    headers = re.findall(r"<th>(.*?)</th>", listing)
    assert "Last active" in headers and "Home size" in headers and "Thread key" in headers
    for key in ("lastActive", "sizeBytes", "threadKey", "costUSD", "unpricedRuns"):
        assert key not in listing, key
    # a size people read, its bytes in the tooltip; archived says no
    size = re.search(r'<td class=num title="(\d+) bytes">([\d.]+ (?:B|KiB|MiB|GiB))</td>', listing)
    assert size is not None and int(size.group(1)) > 0, listing
    assert "<td>no</td>" in listing and "False" not in listing
    # the conversation's page too, its runs and transcript
    for label in ("Thread key", "Last active", "Home size", "Archived", "Jazz conversation"):
        assert f"<th>{label}</th>" in page, label
    for label in ("Run", "Requester", "Started", "Outcome", "Duration", "Time", "Role"):
        assert f"<th>{label}</th>" in page, label
    assert "durationMs" not in page and "jazzConversation" not in page and "False" not in page


async def test_a_person_s_stop_says_who_stopped_it_and_how(env: dict[str, str]) -> None:
    """/stop and the Stop button: each run reads "stopped by ada (...)", neutral, not as a
    failure (no red) and not as the signal the runner took ("interrupted by SIGTERM")."""
    async with running_gateway(env) as (_, client):
        await client.post("halt", "hold H1")
        await wait_until(lambda: len(client.starts("web:halt")) == 1, what="H1 started")
        await client.post("halt", "/stop")
        await client.wait_role("halt", "error")
        await client.post("halt", "hold H2")
        stop = await client.live_stop("halt")
        status, body = await client.press("halt", stop, "ada")
        assert status == 200, (status, body)
        await client.wait_role("halt", "error", count=2)
        page = await _conversation_page(client, "halt")
    stopped = re.findall(r"<td class=stopped>(.*?)</td>", page)
    assert stopped == ["stopped by ada (Stop button)", "stopped by ada (/stop)"], page
    assert "SIGTERM" not in page and "no_envelope" not in page and "class=failed" not in page
    # the replies that said so: not red errors
    roles = re.findall(r"<td class='role-(\w+)'>", page)
    assert roles.count("stopped") == 2 and "error" not in roles, roles
    with sqlite3.connect(Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db") as conn:
        recorded = [row[0] for row in conn.execute("SELECT stopped_by FROM runs ORDER BY id")]
    assert recorded == ["ada (/stop)", "ada (Stop button)"]


async def test_an_archived_home_s_page_names_its_archive_not_its_paths(
    env: dict[str, str],
) -> None:
    from bridge.operators import human_size

    async with running_gateway(env) as (_, client):
        await client.post("packed", "hello")
        await client.wait_role("packed", "assistant")
        done = await asyncio.to_thread(run_cli, env, "homes", "archive", "web:packed", "--json")
        assert done.returncode == 0, done.stderr
        [row] = json.loads(done.stdout)
        page = await _conversation_page(client, "packed")
        listing = await _page(client, "/ops")
    home = Path(env["JAZZ_BRIDGE_ROOT"]) / "chats" / naming.home_name("web:packed")
    assert not home.exists()
    assert str(home) not in page, "the page names paths that are not there"
    assert f"<code>{row['tarball']}</code> ({human_size(row['sizeBytes'])})" in page, page
    assert "<code>jazz-bridge homes restore web:packed</code>" in page, page
    assert "<th>Archived</th><td>yes</td>" in page
    assert f'title="{row["sizeBytes"]} bytes"' in listing  # the archive's size, in the list
