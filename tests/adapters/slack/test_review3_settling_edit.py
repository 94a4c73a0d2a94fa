"""Review: an edit that settles a message is not given up after one passing failure.

When a run ends, its progress bubble ("working… 3m 10s" with a Stop button) is edited into
the run's summary; when a prompt is answered, its message is edited to say so, without
its buttons. Slack answers such a chat.update now and then with a 5xx, or the connection
drops. A 429 held the edit and sent it later; any other passing failure dropped it: the
finished run's bubble kept "working…" and its Stop button for good, the answered
approval kept Approve/Reject. An edit is safe to make twice (it sets the same content), so
a settling one is tried again, bounded.

The real SlackSurface and AsyncWebClient against the fake Slack Web API; every wait bounded.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from fake_slack_api import FakeSlackApi
from slack_sdk.web.async_client import AsyncWebClient
from slack_support import BOT_TOKEN

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
from gateway_harness import wait_until

from adapters.slack.surface import SlackSurface
from bridge.model import Choice, Outgoing, ReplyKind, ReplyTarget
from bridge.ports import DeliveryError

CHANNEL, THREAD_TS, TEAM = "C0CHAN0001", "1764669600.000100", "T0TEAM0001"
TARGET = ReplyTarget(
    surface="slack",
    thread_key=f"slack:{TEAM}:{CHANNEL}:{THREAD_TS}",
    context={"team": TEAM, "channel": CHANNEL, "thread_ts": THREAD_TS},
)
STOP = (Choice(token="AbCdEfGhIjKlMnOp.stop", label="Stop", style="danger"),)
LANDS_WITHIN_S = 15.0


@pytest.fixture
async def surface(fake: FakeSlackApi) -> AsyncIterator[SlackSurface]:
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, retry_handlers=[])
    async with aiohttp.ClientSession() as session:
        client.session = session
        s = SlackSurface(client, BOT_TOKEN, api_url=fake.api_url, max_file_bytes=1024)
        try:
            yield s
        finally:
            await s.close()


def shown(fake: FakeSlackApi, ts: str) -> str:
    (msg,) = [m for m in fake.messages[CHANNEL] if m["ts"] == ts]
    return str(msg["text"])


@pytest.mark.parametrize("kind", ["5xx", "drop"])
async def test_a_summary_edit_that_fails_once_still_lands(
    fake: FakeSlackApi, surface: SlackSurface, kind: str
) -> None:
    bubble = Outgoing(ReplyKind.NOTICE, "working… 3m 10s", STOP)
    ref = await surface.send(TARGET, bubble, reply_key="progress:1")
    ts = ref.partition(":")[2]
    fake.fail("chat.update", kind)  # the summary's edit: Slack answers 503 / drops it
    with pytest.raises(DeliveryError):
        await surface.edit(TARGET, ref, Outgoing(ReplyKind.NOTICE, "✓ 3 tools · 3m 12s"))
    try:
        await wait_until(lambda: "3m 12s" in shown(fake, ts), LANDS_WITHIN_S, "the summary")
    except AssertionError:
        raise AssertionError(
            f"one {kind} on the summary's chat.update and the bubble shows "
            f"{shown(fake, ts)!r} for good (its Stop button too); chat.update calls: "
            f"{[c.status for c in fake.calls if c.method == 'chat.update']}"
        ) from None
    (msg,) = [m for m in fake.messages[CHANNEL] if m["ts"] == ts]
    assert not [b for b in msg.get("blocks") or [] if b["type"] == "actions"]


async def test_a_progress_edit_that_fails_is_not_tried_again(
    fake: FakeSlackApi, surface: SlackSurface
) -> None:
    """Only an edit that settles a message is tried again: a progress line is replaced by
    the next one anyway, and retrying it would spend the workspace's edit budget."""
    ref = await surface.send(TARGET, Outgoing(ReplyKind.NOTICE, "working… 1s", STOP), reply_key="p")
    fake.fail("chat.update", "5xx")
    with pytest.raises(DeliveryError) as failed:
        await surface.edit(TARGET, ref, Outgoing(ReplyKind.NOTICE, "working… 4s", STOP))
    assert not failed.value.retry_after
    await surface.close()
    assert [c.status for c in fake.calls if c.method == "chat.update"] == [503]
