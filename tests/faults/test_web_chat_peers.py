"""The tokenless web chat against a conversation's own account (hostile input, as root).

Without ``web.token`` the web chat takes a loopback client for the person at the keyboard
unless the host's socket table says a conversation account holds it (bridge/http/peers.py). A
run that sent its request and closed at once left a FIN_WAIT2/TIME_WAIT row the kernel
shows as uid 0: the lookup read that as "not a conversation" and the message was stored
and run in another conversation's thread, under any name. The check now fails closed.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import needs_root, remove_accounts
from faults_support import gateway_env, running_gateway

from bridge.runner.cli import shared_interpreter

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
