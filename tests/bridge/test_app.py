"""The gateway's life (``bridge/app.py``): what its start refuses before it touches anything
(a second gateway on the same root, a taken port, a Slack token Slack rejects, a web chat
beyond loopback without a token), leaving the messages waiting for a start that can serve
them; and how the real ``jazz-bridge serve`` stops, however it is told to: the way SIGTERM
does, its runs ended (none outlives it) and their threads told, once.

The real gateway in process, or the real ``jazz-bridge serve`` process; every wait is
bounded.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, wait_until

from bridge.errors import AdapterError, BridgeError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))

from faults_support import install_runner, leftovers, notes, run_pids, serve
from platforms_support import (
    SLACK_BOT_TOKEN,
    free_port,
    platform_env,
    platform_settings,
    running_fakes,
)

STOP_WAIT_S = 20  # far more than a stop takes (the shutdown grace plus a few seconds)
REFUSED_WAIT_S = 40  # a start refused takes about a second
PORT_WAIT_S = 30  # a start on a taken port, refused


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


# -- a start refused -------------------------------------------------------------------------


async def test_a_second_gateway_on_the_same_root_is_refused_and_touches_nothing(
    env: dict[str, str],
) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("a", "hold L")
        await wait_until(lambda: len(client.starts("web:a")) == 1, what="the first one's run")
        # the same root on another port (PORT 0): it would have taken that run for a
        # leftover of a crash, killed it and answered "interrupted"; nor does it repair
        # the root first (a changed mode the start-up repair would put back stays)
        personas = Path(env["JAZZ_BRIDGE_ROOT"]) / "personas"
        mode = personas.stat().st_mode & 0o7777
        personas.chmod(0o700)
        with pytest.raises(BridgeError, match="another jazz-bridge serve is running"):
            async with running_gateway(env):
                pass
        assert personas.stat().st_mode & 0o7777 == 0o700, "the refused one repaired the root"
        personas.chmod(mode)
        client.release("L")
        answer = (await client.wait_role("a", "assistant"))[0]["text"]
        assert "hold L" in answer
        roles = [m["role"] for m in await client.messages("a")]
        assert "error" not in roles and len(client.starts("web:a")) == 1


async def test_web_chat_beyond_loopback_needs_a_token(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_SERVER__HOST"] = "0.0.0.0"
    with pytest.raises(AdapterError, match=r"web\.token"):
        async with running_gateway(env):
            pass


async def test_a_taken_port_on_an_existing_root_leaves_waiting_messages_alone(
    env: dict[str, str], tmp_path: Path
) -> None:
    """``jazz-bridge serve`` restarted on an existing root whose port is taken.

    A new root's address was probed before anything was made; an existing root's was not, and
    the gateway found the port taken only after recovery had begun: a message accepted before
    a crash was requeued, then closed by the failed start's shutdown with "the gateway is
    shutting down, so this run was stopped... send your message again", never having run, and
    never run at the next start either. systemd's restarts (every 5 s while the port stays
    taken) did so to each waiting message in turn. (Isolation off: without the accounts'
    start-up sweep to wait for, the requeued message is handed out at once.)
    Now the address is checked before the store is touched; the message waits, untouched,
    for a start that can listen, and is run once then."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"
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
            timeout=PORT_WAIT_S,
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


async def test_a_rejected_slack_bot_token_refuses_the_start(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]
) -> None:
    """``jazz-bridge serve`` started with a Slack bot token Slack rejects.

    Telegram's ``getMe`` answered 401 stops the start with one line naming ``telegram.token``.
    Slack's ``auth.test`` answered ``invalid_auth`` was only a warning: the gateway said it was
    listening, ``/readyz`` and ``/healthz`` answered 200 (``"slack": "ok"``), Slack's events were
    acknowledged and run, and not one answer could ever be posted."""
    async with running_fakes(slack_token="xoxb-the-token-slack-knows") as (slack, telegram):
        env = platform_env(
            tmp_path / "root",
            fake_dir,
            uid_range,
            slack,
            telegram,
            JAZZ_BRIDGE_SERVER__PORT=str(free_port()),
            JAZZ_BRIDGE_ISOLATION="off",
        )
        env.pop("JAZZ_BRIDGE_TELEGRAM__TOKEN")  # Slack alone
        proc = subprocess.Popen(
            [sys.executable, "-m", "bridge.cli", "serve"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            _, err = await asyncio.to_thread(proc.communicate, timeout=REFUSED_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.terminate()
            _, err = proc.communicate(timeout=REFUSED_WAIT_S)
            raise AssertionError(
                "serve kept running (and said it was ready) with a bot token Slack rejects:\n"
                + err.decode()[-2000:]
            ) from None
        text = err.decode()
        print(text[-1500:])
        assert proc.returncode == 2, text[-2000:]
        last = text.strip().splitlines()[-1]
        assert last.startswith("jazz-bridge: error:"), text[-2000:]
        assert "slack.bot_token" in last and "invalid_auth" in last, last
        assert "Traceback" not in text
        assert SLACK_BOT_TOKEN not in text  # the token itself is never printed
        assert [c for c in slack.calls if c.method == "auth.test"], "Slack was never asked"


async def test_a_rejected_token_leaves_the_messages_waiting_alone(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]
) -> None:
    """Refused after the recovery had begun, the start's stop would close each message left
    accepted with "shutting down, send it again" without running it."""
    env = gateway_env(tmp_path / "root", fake_dir, uid_range, JAZZ_BRIDGE_ISOLATION="off")
    async with serve(env, tmp_path) as (proc, client):
        await client.post("k", "hold K1", key="m1")
        await wait_until(lambda: len(client.starts("web:k")) == 1, what="K1 started")
        await client.post("k", "hold K2", key="m2")  # queued behind K1
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    client.release("K1")
    async with running_fakes(slack_token="xoxb-the-token-slack-knows") as (slack, telegram):
        with_slack = {**env, **platform_settings(slack, telegram)}
        with_slack.pop("JAZZ_BRIDGE_TELEGRAM__TOKEN")
        with_slack["JAZZ_BRIDGE_SERVER__PORT"] = str(free_port())
        run = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "bridge.cli", "serve"],
            env=with_slack,
            cwd=tmp_path,
            capture_output=True,
            timeout=REFUSED_WAIT_S,
        )
    assert run.returncode == 2, run.stderr.decode()[-2000:]
    client.release("K2")
    async with serve(env, tmp_path) as (proc, client):
        answers = await client.wait_role("k", "assistant")
        msgs = await client.messages("k")
        assert "K2" in str(answers[0]["text"]), msgs
        assert not [m for m in msgs if "shutting down" in str(m["text"])], msgs


# -- a stop ----------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _stop(proc: subprocess.Popen[bytes], sig: signal.Signals) -> float:
    """Send ``sig``; how long the gateway took to exit (bounded)."""
    t0 = time.monotonic()
    proc.send_signal(sig)
    proc.wait(timeout=STOP_WAIT_S)
    return time.monotonic() - t0


async def test_a_hangup_stops_the_gateway_like_sigterm(env: dict[str, str], tmp_path: Path) -> None:
    """SIGHUP (the terminal of a foreground ``serve`` closed, an operator's ``kill -HUP``
    expecting a reload) killed the gateway on the spot: its run went on without it and the
    thread heard nothing until some later start."""
    async with serve(env, tmp_path) as (proc, client):
        await client.post("h", "hold H1")
        await wait_until(lambda: len(client.starts("web:h")) == 1, what="H1 started")
        runner_pid = client.starts("web:h")[0]["pid"]
        _stop(proc, signal.SIGHUP)
        print(f"\nexit status after SIGHUP: {proc.returncode}")
        assert proc.returncode == 0, f"killed by the hangup (exit status {proc.returncode})"
        await wait_until(lambda: not _alive(runner_pid), 5, "the run to be ended")
    async with serve(env, tmp_path) as (proc, client):
        msgs = await client.messages("h")
        assert len([m for m in msgs if "shutting down" in str(m["text"])]) == 1, msgs
        assert len(client.starts("web:h")) == 1


async def test_runs_cut_off_by_the_shutdown_grace_do_not_outlive_the_gateway(
    env: dict[str, str], tmp_path: Path, fake_dir: Path
) -> None:
    """A run that ignores SIGTERM, with a shutdown grace shorter than runner.kill_grace_s:
    the gateway gave up waiting and exited, and the run (and its child) kept running as the
    conversation's account with nobody left to stop it."""
    install_runner(env, fake_dir, "fault_runner.py")
    env["JAZZ_BRIDGE_SERVER__SHUTDOWN_GRACE_S"] = "1"
    env["JAZZ_BRIDGE_RUNNER__KILL_GRACE_S"] = "10"
    async with serve(env, tmp_path) as (proc, client):
        await client.post("n", "noterm")
        await wait_until(
            lambda: any(n.get("event") == "children" for n in notes(fake_dir)),
            what="the run and its child",
        )
        took = _stop(proc, signal.SIGTERM)
        assert proc.returncode == 0
        uids, pids, sessions = run_pids(fake_dir)
        left = leftovers(uids=uids, pids=pids, sessions=sessions)
        print(f"\nexited after {took:.1f}s; left running: {[str(p) for p in left]}")
        assert not left, "left running after the gateway exited: " + "; ".join(map(str, left))
    async with serve(env, tmp_path) as (proc, client):
        msgs = await client.messages("n")
        told = [m for m in msgs if m["role"] != "user"]
        assert len(told) == 1 and "interrupted" in str(told[0]["text"]), msgs
