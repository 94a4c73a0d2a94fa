"""Review 3: the web chat's token given as RFC 7235 allows (the scheme in any case)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bridge"))
from gateway_harness import gateway_env, running_gateway

WEB_TOKEN = "web-token-for-the-review-0123456789"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range, JAZZ_BRIDGE_WEB__TOKEN=WEB_TOKEN)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_the_bearer_scheme_is_case_insensitive(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        url = f"{client.base}/api/threads/t/messages"
        for scheme in ("Bearer", "bearer", "BEARER"):
            headers = {"Authorization": f"{scheme} {WEB_TOKEN}"}
            async with client.session.get(url, headers=headers) as r:
                assert r.status == 200, (scheme, r.status, await r.text())
        async with client.session.get(url, headers={"Authorization": "bearer wrong"}) as r:
            assert r.status == 401
