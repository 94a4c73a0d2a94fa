"""Behind a TLS-terminating proxy the gateway sees plain http, so the ops login cookie was
never marked Secure: a browser would send it over any http link to the same host. With
``ops.secure_cookie`` it is; without it, a plain http login keeps working."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway

TOKEN = "ops-token-for-the-secure-cookie-0123"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range, JAZZ_BRIDGE_OPS__TOKEN=TOKEN)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


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
