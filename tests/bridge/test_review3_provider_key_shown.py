"""Review: a provider key the gateway hands to every run by name (``AZURE_OPENAI_*`` is in
the runner's environment allowlist) was shown in the chat and written to the log when a run
crashed quoting it (and would have been written to the log by any line quoting it).

A run that ends without an envelope is answered with the last lines it wrote on stderr, and
those lines (and the log's) are masked for every secret the gateway knows. From its own
environment it knew only names holding TOKEN, SECRET, PASSWORD, API_KEY or ACCESS_KEY:
``AZURE_OPENAI_KEY`` (the name Azure's own quickstarts use) holds none of those, so a run
that printed its request's ``api-key`` header on a failure put the key in front of everyone
in the chat. A name ending in KEY is a key.

The real ``jazz-bridge serve``, the web chat, a runner that crashes quoting its key.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))

from faults_support import gateway_env, serve

from bridge.runner.cli import shared_interpreter

AZURE_KEY = "3f9c2a7b8e1d4c6a9b0e5f7a2c4d6e8f"

# A run whose provider call failed and that quotes the request it made, then dies without an
# envelope (as a runtime's unhandled error does).
CRASHING_RUNNER = """\
import os, sys
sys.stdin.readline()
sys.stderr.write("POST https://example.openai.azure.com/openai/deployments/gpt/chat\\n")
sys.stderr.write("api-key: " + os.environ.get("AZURE_OPENAI_KEY", "(none)") + "\\n")
sys.stderr.write("Error: 500 Internal Server Error\\n")
sys.exit(1)
"""


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    runner = fake_dir / "crashing_runner.py"
    runner.write_text(CRASHING_RUNNER)
    runner.chmod(0o755)
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e["JAZZ_BRIDGE_RUNNER__COMMAND"] = f'["{shared_interpreter()}", "{runner}"]'
    e["AZURE_OPENAI_KEY"] = AZURE_KEY  # the gateway's environment, as systemd's secrets.env
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_a_provider_key_quoted_by_a_crashing_run_is_masked(
    env: dict[str, str], tmp_path: Path
) -> None:
    """The chat's failure reply quotes the run's stderr, the key masked in it."""
    async with serve(env, tmp_path) as (_, client):
        await client.post("t", "hello")
        (reply,) = await client.wait_role("t", "error")
    assert "api-key:" in reply["text"], reply["text"]  # the run's stderr is shown
    assert AZURE_KEY not in reply["text"], f"the chat shows the key: {reply['text']}"
