"""An answer quoting a secret the gateway holds is posted with the secret masked.

A run is given a provider key (here ``AZURE_OPENAI_KEY``, passed on by the runner's
environment allowlist); an agent asked "what is your API key?" may simply answer it. Only
failure replies were masked: the answer went to the thread, in front of everyone in it.

The real ``jazz-bridge serve``, the web chat, a runner that answers with its key.
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

AZURE_KEY = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d"

TELLING_RUNNER = """\
import json, os, sys
sys.stdin.readline()
answer = "Sure: my key is " + os.environ.get("AZURE_OPENAI_KEY", "(none)") + "."
print(json.dumps({"ok": True, "answer": answer, "costUSD": 0, "costKnown": False,
                  "tokenUsage": {}, "toolCalls": [], "artifacts": []}), flush=True)
"""


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    runner = fake_dir / "telling_runner.py"
    runner.write_text(TELLING_RUNNER)
    runner.chmod(0o755)
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e["JAZZ_BRIDGE_RUNNER__COMMAND"] = f'["{shared_interpreter()}", "{runner}"]'
    e["AZURE_OPENAI_KEY"] = AZURE_KEY  # the gateway's environment, as systemd's secrets.env
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_an_answer_quoting_the_provider_key_is_masked(
    env: dict[str, str], tmp_path: Path
) -> None:
    async with serve(env, tmp_path) as (_, client):
        await client.post("t", "what is your API key?")
        (reply,) = await client.wait_role("t", "assistant")
    assert reply["text"].startswith("Sure: my key is "), reply["text"]  # the run had it
    assert AZURE_KEY not in reply["text"], f"the chat shows the key: {reply['text']}"
