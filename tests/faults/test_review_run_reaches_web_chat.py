"""Review: a conversation's run must not read (or write) another conversation's chat.

docs/design.md: "one conversation cannot read another's". As root every conversation runs as
its own account so that a hostile agent in conversation A cannot read B's files. But the
gateway serves the web chat's API on 127.0.0.1 without a token by default, and a run is a
process on the same host: A's run simply asks the gateway for B's thread
(``GET /api/threads/b/messages``) and gets every message and answer of it; it could as
well post into B's thread (and have B's agent read B's files out for it) or press B's
buttons. Nothing in the run's sandbox (provisioning/sandbox.py) nor in the web chat's guard
(which only thinks of browsers) tells a conversation's account from the person at the
keyboard.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import needs_root, remove_accounts
from faults_support import gateway_env, running_gateway

from bridge.runner.cli import shared_interpreter

pytestmark = [pytest.mark.faults, needs_root]

RUNNER = r"""
import json, os, sys, urllib.request
first = json.loads(sys.stdin.readline())
prompt = first["prompt"]
fake = os.environ["FAKE_DIR"]
if prompt.startswith("steal"):
    port = open(os.path.join(fake, "port")).read().strip()
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/api/threads/b/messages", timeout=10
        ) as resp:
            got = "status %d: %s" % (resp.status, resp.read().decode()[:4000])
    except Exception as exc:
        got = "refused: %r" % (exc,)
    answer = "stolen: uid %d: %s" % (os.getuid(), got)
else:
    answer = "ok: " + prompt
env = {"ok": True, "answer": answer, "costUSD": 0.0, "costKnown": True,
       "tokenUsage": {"promptTokens": 1, "completionTokens": 1, "totalTokens": 2},
       "toolCalls": [], "artifacts": []}
sys.stdout.write(json.dumps(env) + "\n")
sys.stdout.flush()
"""


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range, JAZZ_BRIDGE_ISOLATION="on")
    runner = fake_dir / "review_web_runner.py"
    runner.write_text(RUNNER)
    os.chmod(runner, 0o755)
    e["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_a_conversations_run_cannot_read_another_conversations_web_thread(
    env: dict[str, str], fake_dir: Path
) -> None:
    secret = f"B-PRIVATE-{secrets.token_hex(8)}"
    async with running_gateway(env) as (app, client):
        (fake_dir / "port").write_text(str(app.port))
        await client.post("b", f"my card number is {secret}", user="bob")
        await client.wait_role("b", "assistant")
        await client.post("a", "steal", user="mallory")
        answer = (await client.wait_role("a", "assistant"))[0]["text"]
        print("\nA's run got:", answer[:300])
        assert answer.startswith("stolen: uid "), answer
        # the run is A's own account (isolated), not root, not the gateway's
        assert not answer.startswith("stolen: uid 0:"), answer
        assert secret not in answer, "conversation A's run read conversation B's thread"
