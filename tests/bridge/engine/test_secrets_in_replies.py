"""A secret the gateway holds is masked in what the chat is shown: an answer quoting a
provider key, a crashed run's stderr quoting one (``AZURE_OPENAI_KEY``: a name ending in KEY
is a key), and a key cut in two by a length cap (masked up to the cut).

A run is given provider keys (the runner's environment allowlist, ``runner.extra_env``); an
agent asked "what is your API key?" may simply answer it, and a run that dies without an
envelope is answered with the end of what it wrote on stderr. The real ``jazz-bridge
serve``, the web chat, runners of the tests' own that quote their keys.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from faults_support import serve

from bridge.logs import MIN_SECRET_LEN
from bridge.runner.command import shared_interpreter


def use_runner(env: dict[str, str], fake_dir: Path, name: str, source: str) -> None:
    runner = fake_dir / name
    runner.write_text(source)
    runner.chmod(0o755)
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])


ANSWERED_KEY = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d"


TELLING_RUNNER = """\
import json, os, sys
sys.stdin.readline()
answer = "Sure: my key is " + os.environ.get("AZURE_OPENAI_KEY", "(none)") + "."
print(json.dumps({"ok": True, "answer": answer, "costUSD": 0, "costKnown": False,
                  "tokenUsage": {}, "toolCalls": [], "artifacts": []}), flush=True)
"""


async def test_an_answer_quoting_the_provider_key_is_masked(
    env: dict[str, str], tmp_path: Path, fake_dir: Path
) -> None:
    """An answer quoting a secret the gateway holds is posted with the secret masked
    (only failure replies were: the answer went to the thread, in front of everyone in
    it)."""
    use_runner(env, fake_dir, "telling_runner.py", TELLING_RUNNER)
    env["AZURE_OPENAI_KEY"] = ANSWERED_KEY  # the gateway's environment, as systemd's secrets.env
    async with serve(env, tmp_path) as (_, client):
        await client.post("t", "what is your API key?")
        (reply,) = await client.wait_role("t", "assistant")
    assert reply["text"].startswith("Sure: my key is "), reply["text"]  # the run had it
    assert ANSWERED_KEY not in reply["text"], f"the chat shows the key: {reply['text']}"


CRASH_KEY = "3f9c2a7b8e1d4c6a9b0e5f7a2c4d6e8f"


# A run whose provider call failed and that quotes the request it made, then dies without an
# envelope (as a runtime's unhandled error does).
QUOTING_RUNNER = """\
import os, sys
sys.stdin.readline()
sys.stderr.write("POST https://example.openai.azure.com/openai/deployments/gpt/chat\\n")
sys.stderr.write("api-key: " + os.environ.get("AZURE_OPENAI_KEY", "(none)") + "\\n")
sys.stderr.write("Error: 500 Internal Server Error\\n")
sys.exit(1)
"""


async def test_a_provider_key_quoted_by_a_crashing_run_is_masked(
    env: dict[str, str], tmp_path: Path, fake_dir: Path
) -> None:
    """The chat's failure reply quotes the run's stderr, the key masked in it.

    A run that ends without an envelope is answered with the last lines it wrote on
    stderr, masked for every secret the gateway knows. From its own environment it knew
    only names holding TOKEN, SECRET, PASSWORD, API_KEY or ACCESS_KEY:
    ``AZURE_OPENAI_KEY`` (the name Azure's own quickstarts use) holds none of those, so a
    run that printed its request's ``api-key`` header on a failure put the key in front
    of everyone in the chat."""
    use_runner(env, fake_dir, "crashing_runner.py", QUOTING_RUNNER)
    env["AZURE_OPENAI_KEY"] = CRASH_KEY  # the gateway's environment, as systemd's secrets.env
    async with serve(env, tmp_path) as (_, client):
        await client.post("t", "hello")
        (reply,) = await client.wait_role("t", "error")
    assert "api-key:" in reply["text"], reply["text"]  # the run's stderr is shown
    assert CRASH_KEY not in reply["text"], f"the chat shows the key: {reply['text']}"


PROVIDER_KEY = "3f9c2a7b8e1d4c6a9b0e5f7a2c4d6e8f"


# The run quotes its key where the gateway's cap on a stderr line (500 characters: the key
# starts at 490) or on the tail shown (the last 800 characters: they start 10 characters
# into the key) falls.
CUT_KEY_RUNNER = """\
import json, os, sys
prompt = json.loads(sys.stdin.readline())["prompt"]
key = os.environ["OPENAI_API_KEY"]
if prompt == "line":
    sys.stderr.write("x" * 480 + " api-key: " + key + " (rejected)\\n")
else:
    sys.stderr.write("y" * 450 + " api-key: " + key + "\\n" + "z" * 400 + "\\n" + "w" * 376)
sys.exit(1)
"""


def _pieces(secret: str) -> list[str]:
    """Every run of ``MIN_SECRET_LEN`` characters of ``secret``."""
    return [secret[i : i + MIN_SECRET_LEN] for i in range(len(secret) - MIN_SECRET_LEN + 1)]


@pytest.mark.parametrize("cap", ["line", "tail"])
async def test_a_key_cut_by_a_cap_is_not_shown_in_part(
    env: dict[str, str], tmp_path: Path, cap: str, fake_dir: Path
) -> None:
    """Each stderr line is capped at 500 characters, the last five lines at 800. The caps
    were applied first and the secrets masked after, in the text that was left: a key the
    cap cut in two was no longer the key, so the piece of it the cap kept went to the chat
    as it was (the key's first characters, or its last ones). A secret cut short is masked
    too, up to the cut."""
    use_runner(env, fake_dir, "crashing_runner.py", CUT_KEY_RUNNER)
    env["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"] = json.dumps(
        {"FAKE_DIR": str(fake_dir), "OPENAI_API_KEY": PROVIDER_KEY}
    )
    async with serve(env, tmp_path) as (_, client):
        await client.post("t", cap)
        (reply,) = await client.wait_role("t", "error")
    text = reply["text"]
    assert "api-key:" in text or "w" * 100 in text, text  # the run's stderr is shown
    shown = [piece for piece in _pieces(PROVIDER_KEY) if piece in text]
    assert not shown, f"the chat shows part of the key: {text[-300:]!r}"
