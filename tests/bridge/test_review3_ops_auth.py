"""Review 3 of the operator view's login: behind a proxy that asks for a password, and how
long the login cookie lasts."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway

TOKEN = "ops-token-for-the-review-0123456789"
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
    from bridge.http.ops import COOKIE_TTL_S, _cookie_value

    issued = time.time() - COOKIE_TTL_S - 60  # a login of more than its lifetime ago
    old = _cookie_value(TOKEN.encode(), issued)
    async with running_gateway(env) as (app, _), aiohttp.ClientSession() as s:
        url = f"http://127.0.0.1:{app.port}/ops"
        async with s.get(url, cookies={COOKIE: old}) as r:
            status, text = r.status, await r.text()
    assert status == 401, status
    assert "/ops?token=" in text
