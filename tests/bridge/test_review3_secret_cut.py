"""Review: a provider key cut in two by a length cap was shown in the chat, in part.

A run that ends without an envelope is answered with the end of what it wrote on stderr:
each line capped at 500 characters, the last five lines at 800. The caps are applied first
and the secrets masked after, in the text that is left: a key the cap cut in two is no
longer the key, so the piece of it the cap kept went to the chat as it was (the key's first
characters, or its last ones). A secret cut short is masked too, up to the cut.

The real ``jazz-bridge serve``, the web chat, a runner that crashes quoting its key where a
cap falls inside it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))

from faults_support import gateway_env, serve

from bridge.logs import MIN_SECRET_LEN
from bridge.runner.cli import shared_interpreter

PROVIDER_KEY = "3f9c2a7b8e1d4c6a9b0e5f7a2c4d6e8f"

# The run quotes its key where the gateway's cap on a stderr line (500 characters: the key
# starts at 490) or on the tail shown (the last 800 characters: they start 10 characters
# into the key) falls.
CRASHING_RUNNER = """\
import json, os, sys
prompt = json.loads(sys.stdin.readline())["prompt"]
key = os.environ["OPENAI_API_KEY"]
if prompt == "line":
    sys.stderr.write("x" * 480 + " api-key: " + key + " (rejected)\\n")
else:
    sys.stderr.write("y" * 450 + " api-key: " + key + "\\n" + "z" * 400 + "\\n" + "w" * 376)
sys.exit(1)
"""


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    runner = fake_dir / "crashing_runner.py"
    runner.write_text(CRASHING_RUNNER)
    runner.chmod(0o755)
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])
    e["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"] = json.dumps(
        {"FAKE_DIR": str(fake_dir), "OPENAI_API_KEY": PROVIDER_KEY}
    )
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def _pieces(secret: str) -> list[str]:
    """Every run of ``MIN_SECRET_LEN`` characters of ``secret``."""
    return [secret[i : i + MIN_SECRET_LEN] for i in range(len(secret) - MIN_SECRET_LEN + 1)]


@pytest.mark.parametrize("cap", ["line", "tail"])
async def test_a_key_cut_by_a_cap_is_not_shown_in_part(
    env: dict[str, str], tmp_path: Path, cap: str
) -> None:
    async with serve(env, tmp_path) as (_, client):
        await client.post("t", cap)
        (reply,) = await client.wait_role("t", "error")
    text = reply["text"]
    assert "api-key:" in text or "w" * 100 in text, text  # the run's stderr is shown
    shown = [piece for piece in _pieces(PROVIDER_KEY) if piece in text]
    assert not shown, f"the chat shows part of the key: {text[-300:]!r}"
