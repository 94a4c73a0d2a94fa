"""The operators' view at /ops (``bridge/http/ops.py``): its login behind a proxy that asks
for a password, how long the login cookie lasts and when it is Secure, and what a page
shows of a failed run (the provider key a runner quoted, masked).

Behind a TLS-terminating proxy the gateway sees plain http, so the login cookie was never
marked Secure: a browser would send it over any http link to the same host. With
``ops.secure_cookie`` it is; without it, a plain http login keeps working. The real
gateway in process, or the real ``jazz-bridge serve``; the web chat.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from accounts_support import remove_accounts
from faults_support import serve
from gateway_harness import gateway_env, running_gateway

from bridge.runner.command import shared_interpreter

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
