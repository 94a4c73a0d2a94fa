"""Review 4 of the operators' page: what it shows of a failed run.

A run's provider key (``runner.extra_env``, every value a secret) quoted in the error a
runner reports is masked in the chat's reply and in the log; the /ops page, served over
HTTP to whoever holds the ops token, showed the stored error as the runner wrote it.

The real ``jazz-bridge serve``, the web chat, a runner that fails quoting its key.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))

from faults_support import gateway_env, serve

from bridge.runner.cli import shared_interpreter

PROVIDER_KEY = "sk-review4-7d1e9a3c5b2f4e6a8c0d"
OPS_TOKEN = "ops-token-for-the-review4-secret-test"

# A runner whose provider refused its key, and which says so in its envelope's error.
FAILING_RUNNER = """\
import json, os, sys
sys.stdin.readline()
key = os.environ.get("OPENAI_API_KEY", "(none)")
print(json.dumps({"ok": False, "code": "provider_error",
                  "error": "401 from the provider: invalid api key " + key}))
"""


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    runner = fake_dir / "failing_runner.py"
    runner.write_text(FAILING_RUNNER)
    runner.chmod(0o755)
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])
    extra = json.loads(e["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"])
    e["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"] = json.dumps({**extra, "OPENAI_API_KEY": PROVIDER_KEY})
    e["JAZZ_BRIDGE_OPS__TOKEN"] = OPS_TOKEN
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_the_ops_page_masks_a_key_quoted_in_a_run_error(
    env: dict[str, str], tmp_path: Path
) -> None:
    async with serve(env, tmp_path) as (_, client):
        await client.post("keyed", "hello")
        (reply,) = await client.wait_role("keyed", "error")
        assert "invalid api key" in reply["text"]
        assert PROVIDER_KEY not in reply["text"]  # the chat's reply: masked already
        auth = {"Authorization": f"Bearer {OPS_TOKEN}"}
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
