"""The Slack surface's edit state, on the real AsyncWebClient against the fake Slack Web API:
which edit of a message lands, however many messages were edited before."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from fake_slack_api import FakeSlackApi
from slack_sdk.web.async_client import AsyncWebClient
from slack_support import BOT_TOKEN

from adapters.slack.surface import MAX_EDIT_STATE, SlackSurface
from bridge.model import Choice, Outgoing, ReplyKind, ReplyTarget
from bridge.ports import DeliveryError

CHANNEL, THREAD_TS = "C0CHAN0001", "1764669600.000100"
STOP = (Choice(token="AbCdEfGhIjKlMnOp.stop", label="Stop", style="danger"),)
AT_ONCE = 50  # edits made together: the surface's edit state seen under concurrency


@pytest.fixture
async def surface(fake: FakeSlackApi) -> AsyncIterator[SlackSurface]:
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, retry_handlers=[])
    async with aiohttp.ClientSession() as session:
        client.session = session
        surface = SlackSurface(client, BOT_TOKEN, api_url=fake.api_url, max_file_bytes=1024)
        try:
            yield surface
        finally:
            await surface.close()


def target(i: int = 0) -> ReplyTarget:
    """A thread in workspace ``i``: one workspace each keeps its budget out of the way."""
    team = f"T{i:07d}"
    return ReplyTarget(
        surface="slack",
        thread_key=f"slack:{team}:{CHANNEL}:{THREAD_TS}",
        context={"team": team, "channel": CHANNEL, "thread_ts": THREAD_TS},
    )


def bubble(fake: FakeSlackApi, text: str) -> str:
    """A message in the thread, as the surface refers to it."""
    posted = fake._post({"channel": CHANNEL, "thread_ts": THREAD_TS, "text": text})
    return f"{CHANNEL}:{posted['ts']}"


def edits_of(fake: FakeSlackApi, ref: str) -> list[str]:
    ts = ref.partition(":")[2]
    return [str(c.args.get("text")) for c in fake.called("chat.update") if c.args.get("ts") == ts]


async def test_an_edit_is_not_dropped_when_the_edit_state_is_trimmed(
    fake: FakeSlackApi, surface: SlackSurface
) -> None:
    """Once more than MAX_EDIT_STATE messages were edited, idle ones are forgotten. The edit
    that triggers the clean-out is not among them: were its sequence number forgotten, it
    would be taken for one a newer edit replaced and silently not made (and the core would
    believe the bubble shows the run's summary)."""
    refs = [bubble(fake, f"b{i}") for i in range(MAX_EDIT_STATE + 1)]

    async def progress(i: int) -> None:
        await surface.edit(target(i), refs[i], Outgoing(ReplyKind.NOTICE, f"w{i}", STOP))

    for start in range(0, len(refs), AT_ONCE):  # every bubble shown its progress once
        await asyncio.gather(*(progress(i) for i in range(start, min(start + AT_ONCE, len(refs)))))
    assert len(fake.called("chat.update")) == len(refs)

    # the first bubble's run ends: its summary replaces the progress line and the button
    await surface.edit(target(0), refs[0], Outgoing(ReplyKind.NOTICE, "summary of run 0"))
    assert edits_of(fake, refs[0]) == ["w0", "summary of run 0"]


async def test_a_stale_press_does_not_replace_a_held_summary(
    fake: FakeSlackApi, surface: SlackSurface
) -> None:
    """A Stop pressed on a bubble whose summary edit is held (a 429): settling the pressed
    message ("This run has ended.") must not replace that newer edit, which drops the
    button itself; the bubble ends on the summary."""
    ref = bubble(fake, "working… 12s")
    fake.fail("chat.update", "429", retry_after=1)
    summary = Outgoing(ReplyKind.NOTICE, "summary of the run")
    with pytest.raises(DeliveryError) as held:
        await surface.edit(target(), ref, summary)
    assert held.value.retry_after  # held, for the workspace's flusher to send
    await surface.settle(target(), ref, Outgoing(ReplyKind.NOTICE, "This run has ended."))
    await surface.close()  # lets the held edit go out (bounded by CLOSE_FLUSH_S)
    assert edits_of(fake, ref) == ["summary of the run"]
