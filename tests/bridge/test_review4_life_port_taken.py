"""Review: ``jazz-bridge serve`` restarted on an existing root whose port is taken.

A new root's address was probed before anything was made; an existing root's was not, and
the gateway found the port taken only after recovery had begun: a message accepted before
a crash was requeued, then closed by the failed start's shutdown with "the gateway is
shutting down, so this run was stopped... send your message again", never having run, and
never run at the next start either. systemd's restarts (every 5 s while the port stays
taken) did so to each waiting message in turn. (Isolation off: without the accounts'
start-up sweep to wait for, the requeued message is handed out at once.)
Now the address is checked before the store is touched; the message waits, untouched,
for a start that can listen, and is run once then.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))

from faults_support import gateway_env, serve, wait_until

EXIT_WAIT_S = 30


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range, JAZZ_BRIDGE_ISOLATION="off")
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_a_taken_port_on_an_existing_root_leaves_waiting_messages_alone(
    env: dict[str, str], tmp_path: Path
) -> None:
    async with serve(env, tmp_path) as (proc, client):
        await client.post("k", "hold K1", key="m1")
        await wait_until(lambda: len(client.starts("web:k")) == 1, what="K1 started")
        await client.post("k", "hold K2", key="m2")  # queued behind K1
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    client.release("K1")

    with socket.socket() as taken:  # something else listens on the gateway's port
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "bridge.cli", "serve"],
            env={**env, "JAZZ_BRIDGE_SERVER__PORT": str(port)},
            cwd=tmp_path,
            capture_output=True,
            timeout=EXIT_WAIT_S,
        )
    err = run.stderr.decode()
    print(err[-2000:])
    assert run.returncode == 2, err[-2000:]
    assert f"port {port} on 127.0.0.1 is already in use" in err.strip().splitlines()[-1]
    prompts = [s["prompt"] for s in client.starts("web:k")]
    assert prompts == ["hold K1"], f"runs started by a gateway that could not listen: {prompts}"

    client.release("K2")
    async with serve(env, tmp_path) as (proc, client):
        answers = await client.wait_role("k", "assistant")
        msgs = await client.messages("k")
        assert "K2" in str(answers[0]["text"]), msgs
        assert not [m for m in msgs if "shutting down" in str(m["text"])], msgs
        assert len([m for m in msgs if "interrupted" in str(m["text"])]) == 1, msgs
        assert [s["prompt"] for s in client.starts("web:k")] == ["hold K1", "hold K2"]
