"""Review: ``jazz-bridge serve`` started with a Slack bot token Slack rejects.

Telegram's ``getMe`` answered 401 stops the start with one line naming ``telegram.token``.
Slack's ``auth.test`` answered ``invalid_auth`` was only a warning: the gateway said it was
listening, ``/readyz`` and ``/healthz`` answered 200 (``"slack": "ok"``), Slack's events were
acknowledged and run, and not one answer could ever be posted.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))

from faults_support import gateway_env, serve, wait_until
from platforms_support import (
    SLACK_BOT_TOKEN,
    free_port,
    platform_env,
    platform_settings,
    running_fakes,
)

EXIT_WAIT_S = 40  # a start refused takes about a second


async def test_a_rejected_slack_bot_token_refuses_the_start(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]
) -> None:
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
            _, err = await asyncio.to_thread(proc.communicate, timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.terminate()
            _, err = proc.communicate(timeout=EXIT_WAIT_S)
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
            timeout=EXIT_WAIT_S,
        )
    assert run.returncode == 2, run.stderr.decode()[-2000:]
    client.release("K2")
    async with serve(env, tmp_path) as (proc, client):
        answers = await client.wait_role("k", "assistant")
        msgs = await client.messages("k")
        assert "K2" in str(answers[0]["text"]), msgs
        assert not [m for m in msgs if "shutting down" in str(m["text"])], msgs
