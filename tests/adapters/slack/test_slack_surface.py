"""The Slack surface's edits (adapters/slack/), on the real AsyncWebClient against the
fake Slack Web API: which edit of a message lands, however many messages were edited before
or whatever press came meanwhile, and an edit that settles a message (a run's summary, an
answered prompt) tried again after one passing failure (a 5xx, a dropped connection),
while a progress line, replaced by the next one anyway, is not."""

from __future__ import annotations

import asyncio

import pytest
from fake_slack_api import FakeSlackApi
from gateway_harness import wait_until
from slack_support import CHANNEL, TEAM

from adapters.slack.edits import MAX_EDIT_STATE
from adapters.slack.surface import SlackSurface
from bridge.model import Choice, Outgoing, ReplyKind, ReplyTarget
from bridge.ports import DeliveryError

THREAD_TS = "1764669600.000100"
STOP = (Choice(token="AbCdEfGhIjKlMnOp.stop", label="Stop", style="danger"),)
AT_ONCE = 50  # edits made together: the surface's edit state seen under concurrency
TARGET = ReplyTarget(
    surface="slack",
    thread_key=f"slack:{TEAM}:{CHANNEL}:{THREAD_TS}",
    context={"team": TEAM, "channel": CHANNEL, "thread_ts": THREAD_TS},
)
LANDS_WITHIN_S = 15.0


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
