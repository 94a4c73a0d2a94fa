"""Review 4 (parity): a button pressed while the gateway cannot take the press.

A press the gateway fails to record (its state disk full, the store refusing) is told on
Telegram ("Something went wrong; please try again.", an alert) and in the web chat (507,
"the gateway's disk is full"). On Slack the press was acked and the error went to bolt's
log: the button did nothing and no one said why, so the person waited on a run that was
waiting on them. The presser is now told (an ephemeral message); once the disk has room
again the same button answers the prompt.

The real gateway, bolt and AsyncWebClient against the fake Slack Web API, with the state
directory on a small tmpfs that is filled (root only).
"""

from __future__ import annotations

import errno
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import IS_ROOT, remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
from fake_slack_api import FakeSlackApi
from gateway_harness import Client, running_gateway, use_reference_runner, wait_until
from test_slack import ADA, action, buttons, event, mention, posted_ts, press_payload, wait_post


@pytest.fixture
def env(env: dict[str, str], fake_dir: Path) -> dict[str, str]:
    """The Slack modules' environment with the reference runner."""
    use_reference_runner(env, fake_dir)
    return env


@pytest.fixture
def tiny_state(env: dict[str, str]) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted over ``<root>/state``."""
    if not IS_ROOT:
        pytest.skip("needs root to mount a tmpfs over the state directory")
    state = Path(env["JAZZ_BRIDGE_ROOT"]) / "state"
    state.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0750", "jb-review4-state", str(state)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield state
    finally:
        remove_accounts(state / "accounts.json")
        subprocess.run(["umount", "-l", str(state)], check=False)


def fill(directory: Path) -> Path:
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as fh:
        while True:
            try:
                fh.write(b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return filler


async def refuses_writes(client: Client) -> None:
    """Until the store itself says full (SQLite may still have room in pages it holds)."""
    for i in range(60):
        async with client.session.post(
            f"{client.base}/api/threads/filler/messages", json={"user": "x", "text": f"f{i}"}
        ) as resp:
            if resp.status == 507:
                return
    raise AssertionError("the store never refused a write on a full disk")


async def test_a_press_the_gateway_could_not_take_is_told_to_the_presser(
    env: dict[str, str], fake: FakeSlackApi, tiny_state: Path
) -> None:
    async with running_gateway(env) as (app, client):
        asked = mention("Ev0PFAIL1", "!approve bash", ts="1764669800.000100")
        assert await event(app.port, asked) == 200
        (prompt,) = await wait_post(fake, "Approval needed")
        approve = next(b for b in buttons(prompt) if b["text"]["text"] == "Approve")
        press = press_payload(approve["value"], ADA, prompt, posted_ts(fake, prompt))

        filler = fill(tiny_state)
        await refuses_writes(client)
        assert await action(app.port, press) == 200
        await wait_until(
            lambda: bool(fake.called("chat.postEphemeral")), 10, "a word to the presser"
        )
        (told,) = fake.called("chat.postEphemeral")
        assert told.args["user"] == ADA and "try again" in told.args["text"], told.args
        assert told.args["thread_ts"] == "1764669800.000100"

        filler.unlink()
        assert await action(app.port, press) == 200
        await wait_post(fake, "bash")  # the same button now answers it, and the run goes on
