"""README "HTTP": /metrics counts auth failures, and the web API's token guards every
route of it. A wrong or missing token on the reading routes (GET .../messages, the event
stream) was refused (401) but not counted, so an operator watching
``jazz_bridge_auth_failures_total`` saw nobody guessing the token there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway
from prometheus_client.parser import text_string_to_metric_families

TOKEN = "docs-web-token-0123456789"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range, JAZZ_BRIDGE_WEB__TOKEN=TOKEN)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_wrong_or_missing_token_on_the_reading_routes_is_counted(
    env: dict[str, str],
) -> None:
    async with running_gateway(env) as (_app, client):
        wrong = {"Authorization": "Bearer not-the-token"}
        for path in ("/api/threads/t1/messages", "/api/threads/t1/events"):
            for headers in ({}, wrong):
                async with client.session.get(client.base + path, headers=headers) as r:
                    assert r.status == 401, path
        ok = {"Authorization": f"Bearer {TOKEN}"}
        async with client.session.get(client.base + "/api/threads/t1/messages", headers=ok) as r:
            assert r.status == 200
        async with client.session.get(client.base + "/metrics") as r:
            text = await r.text()
    counted = {
        s.labels["reason"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "jazz_bridge_auth_failures_total" and s.labels["platform"] == "web"
    }
    assert counted == {"token": 4}
