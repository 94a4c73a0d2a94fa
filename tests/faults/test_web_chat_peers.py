"""The tokenless web chat against a conversation's own account (hostile input, as root).

docs/design.md: "one conversation cannot read another's". As root every conversation runs as
its own account so that a hostile agent in conversation A cannot read B's files; but the
gateway serves the web chat's API on 127.0.0.1 without a token by default, and a run is a
process on the same host.

Without ``web.token`` the web chat takes a loopback client for the person at the keyboard
unless the host's socket table says a conversation account holds it (bridge/http/peers.py). A
run that sent its request and closed at once left a FIN_WAIT2/TIME_WAIT row the kernel
shows as uid 0: the lookup read that as "not a conversation" and the message was stored
and run in another conversation's thread, under any name. The check now fails closed.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import needs_root, remove_accounts
from faults_support import gateway_env, running_gateway

from bridge.runner.command import shared_interpreter

pytestmark = [pytest.mark.faults, needs_root]

# a client as a conversation's account: sends its request and closes (or reads the answer)
CLIENT = """\
import socket, sys
port, close_at_once = int(sys.argv[1]), sys.argv[2] == "close"
body = b'{"user": "operator-ann", "text": "hostile message"}'
request = (
    b"POST /api/threads/victim/messages HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n"
    b"Content-Type: application/json\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body)
) + body
s = socket.create_connection(("127.0.0.1", port), timeout=30)
s.sendall(request)
if close_at_once:
    s.close()
else:
    print(s.recv(65536).split(b"\\r\\n", 1)[0].decode())
"""


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def as_account(uid: int, port: int, how: str) -> str:
    switch = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    out = subprocess.run(
        [*switch, shared_interpreter(), "-c", CLIENT, str(port), how],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


async def test_a_conversation_account_closing_at_once_stores_nothing(
    env: dict[str, str], uid_range: tuple[int, int]
) -> None:
    uid = uid_range[0] + 1  # an account of this gateway's range, as a run is
    async with running_gateway(env) as (app, client):
        # the control: a client that waits for its answer is refused by its uid
        # (in a thread: the gateway serves on this test's event loop)
        answer = await asyncio.to_thread(as_account, uid, app.port, "wait")
        assert answer == "HTTP/1.1 403 Forbidden"
        for _ in range(3):
            await asyncio.to_thread(as_account, uid, app.port, "close")
        # a request that did get in is stored before its 202: what is stored shows it
        messages = await client.messages("victim")
        assert messages == [], json.dumps(messages)[:500]
        assert client.starts("web:victim") == []
        # the person at the keyboard (root, holding the connection) is still served
        await client.post("victim", "hello from the keyboard")
        assert [m["text"] for m in await client.wait_role("victim", "assistant")]


# -- a run asking the gateway for another conversation's thread ------------------------------


STEALING_RUNNER = r"""
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


async def test_a_conversations_run_cannot_read_another_conversations_web_thread(
    env: dict[str, str], fake_dir: Path
) -> None:
    """A run of conversation A simply asked the gateway for B's thread
    (``GET /api/threads/b/messages``) and got every message and answer of it; it could as
    well post into B's thread (and have B's agent read B's files out for it) or press B's
    buttons. Nothing in the run's sandbox (provisioning/sandbox.py) nor in the web chat's
    guard (which only thought of browsers) told a conversation's account from the person at
    the keyboard."""
    env["JAZZ_BRIDGE_ISOLATION"] = "on"
    runner = fake_dir / "stealing_runner.py"
    runner.write_text(STEALING_RUNNER)
    os.chmod(runner, 0o755)
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])
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
