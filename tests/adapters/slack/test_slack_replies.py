"""Answers on Slack through the real gateway: a long answer split between blocks (never inside
a code block), artifacts uploaded into the thread (one Slack refuses for good is named
there), a 429 waited out, a post or upload whose outcome is unclear (an error, a dropped
answer, a late one) looked up before it is sent again, never posted twice, and the progress
bubbles of one workspace within its chat.update budget, each ending on its summary."""

from __future__ import annotations

from typing import Any

import pytest
from fake_slack_api import Call, FakeSlackApi
from gateway_harness import running_gateway, wait_until
from slack_support import (
    CHANNEL,
    MENTION_TS,
    buttons,
    event,
    mention,
    posted_ts,
    posts,
    sample,
    seen,
    vector,
    wait_post,
    with_fake,
)

from adapters.slack.ratelimit import CHAT_UPDATE_BURST, CHAT_UPDATE_PER_MINUTE

ARTIFACT_ROOT = "1764670300.000100"


async def test_a_long_answer_is_split_between_blocks(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        assert (
            await event(app.port, mention("Ev0LONG", "!long 30000", ts="1764670200.000100")) == 200
        )
        await wait_until(
            lambda: sample(app, "jazz_bridge_runs_total", outcome="ok") == 1, 30, "the run"
        )
        await wait_until(
            lambda: sample(app, "jazz_bridge_replies_total", surface="slack", result="sent") >= 3,
            30,
            "the answer's parts",
        )
        parts = [c for c in posts(fake) if "markdown_text" in c.args]
        assert len(parts) >= 3
        text = "".join(str(c.args["markdown_text"]) for c in parts)
        assert "Paragraph 1." in text
        for call in parts:
            body = str(call.args["markdown_text"])
            assert len(body) <= 12_000
            assert body.count("```") % 2 == 0  # never cut inside a code block
            assert call.args["thread_ts"] == "1764670200.000100"
        keys = [c.args["metadata"]["event_payload"]["reply_key"] for c in parts]
        assert len(keys) == len(set(keys))


async def test_an_artifact_is_uploaded_into_the_thread(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        root = "1764670300.000100"
        assert await event(app.port, mention("Ev0ART", "!artifact plot.png", ts=root)) == 200
        await wait_until(
            lambda: bool(fake.called("files.completeUploadExternal")), 30, "the upload"
        )
        (url,) = fake.called("files.getUploadURLExternal")
        assert url.args["filename"] == "plot.png"
        (upload,) = [c for c in fake.calls if c.method == "upload"]
        assert upload.data is not None and upload.data.startswith(b"\x89PNG")
        (done,) = fake.called("files.completeUploadExternal")
        assert done.args["channel_id"] == CHANNEL and done.args["thread_ts"] == root


class NoUploadsSlack(FakeSlackApi):
    """Slack refusing every upload for good, as it does for an app without files:write."""

    def _m_files_getUploadURLExternal(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": False, "error": "missing_scope", "needed": "files:write"}


@with_fake(NoUploadsSlack)
async def test_an_artifact_slack_refuses_is_named_in_the_thread(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        assert (
            await event(app.port, mention("Ev0NOUP", "!artifact report.csv", ts=ARTIFACT_ROOT))
            == 200
        )
        await wait_post(fake, "wrote workspace/report.csv")  # the answer itself
        failed = 0.0

        def settled() -> bool:  # the artifact's reply: failed, or a note in the thread
            nonlocal failed
            failed = sample(app, "jazz_bridge_replies_total", surface="slack", result="failed")
            return failed >= 1 or len(posts(fake, "report.csv")) >= 2

        await wait_until(settled, 20, "the artifact's reply settled")
        shown = [str(c.args.get("markdown_text"))[:70] for c in posts(fake)]
        assert len(posts(fake, "report.csv")) == 2, (
            f"the upload of report.csv was refused (missing_scope) and the thread got no note "
            f"about it: replies recorded failed: {failed:.0f}; posts in the thread: {shown}"
        )
        note = posts(fake, "report.csv")[1]
        body = str(note.args.get("markdown_text") or note.args.get("text"))
        assert "missing_scope" in body and "files:write" in body
        assert note.args["channel"] == CHANNEL and note.args["thread_ts"] == ARTIFACT_ROOT
        assert not fake.called("files.completeUploadExternal")


async def test_a_429_on_chat_update_is_honoured_and_the_answer_sent_once(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    fake.fail("chat.update", "429", retry_after=2)
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, mention("Ev0RATE", "!delay 4", ts="1764670600.000100")) == 200
        await wait_post(fake, "You said")
        await wait_until(
            lambda: sample(app, "jazz_bridge_replies_total", surface="slack", result="sent") >= 1,
            10,
            "the answer recorded as sent",
        )
        refused = [c for c in fake.calls if c.method == "chat.update" and c.status == 429]
        assert len(refused) == 1
        later = [c for c in fake.called("chat.update") if c.at > refused[0].at]
        await wait_until(lambda: bool(fake.called("chat.update")), 10, "an edit after the 429")
        later = [c for c in fake.called("chat.update") if c.at > refused[0].at]
        assert later and later[0].at - refused[0].at >= 1.9  # nothing inside Retry-After
        assert len(posts(fake, "You said")) == 1


async def test_an_upload_whose_answer_was_lost_is_found_not_uploaded_again(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    """Slack shared the file, the answer never came: files carry no metadata, so the thread
    is searched for the same file (name, size) before the upload is tried again."""
    fake.fail("files.completeUploadExternal", "drop", commit=True)
    async with running_gateway(env) as (app, _client):
        root = "1764670300.000100"
        assert await event(app.port, mention("Ev0ART", "!artifact plot.png", ts=root)) == 200
        await wait_until(
            lambda: (
                sample(app, "jazz_bridge_replies_total", surface="slack", result="confirmed") >= 1
            ),
            30,
            "the upload found in the thread",
        )
        shared = [m for m in fake.thread(CHANNEL, root) if m.get("files")]
        assert [f["name"] for m in shared for f in m["files"]] == ["plot.png"]
        # the one completion (whose answer was dropped), and no second upload
        assert [c.method for c in fake.calls if c.method.startswith("files.")] == [
            "files.getUploadURLExternal",
            "files.completeUploadExternal",
        ]
        assert fake.called("conversations.replies")


@pytest.mark.parametrize("kind", ["internal_error", "5xx"])
async def test_an_upload_answered_internal_error_is_found_not_uploaded_again(
    env: dict[str, str], fake: FakeSlackApi, kind: str
) -> None:
    fake.fail("files.completeUploadExternal", kind, commit=True)  # shared, then the error
    async with running_gateway(env) as (app, _client):
        root = "1764670400.000100"
        assert await event(app.port, mention("Ev0ARTIE", "!artifact plot.png", ts=root)) == 200
        await wait_until(
            lambda: (
                sample(app, "jazz_bridge_replies_total", surface="slack", result="confirmed")
                + sample(app, "jazz_bridge_replies_total", surface="slack", result="sent")
                >= 2
            ),
            30,
            "the answer and the artifact delivered",
        )
        shared = [m for m in fake.thread(CHANNEL, root) if m.get("files")]
        names = [f["name"] for m in shared for f in m["files"]]
        assert names == ["plot.png"], f"the artifact is in the thread {len(names)} times"
        completions = [c for c in fake.calls if c.method == "files.completeUploadExternal"]
        assert len(completions) == 1


@pytest.mark.parametrize("kind", ["5xx", "internal_error", "drop"])
async def test_an_unclear_post_failure_is_checked_not_resent(
    env: dict[str, str], fake: FakeSlackApi, kind: str
) -> None:
    fake.fail(
        "chat.postMessage",
        kind,
        commit=True,  # Slack posted it, the gateway can't know
        when=lambda a: "incident notes" in str(a.get("markdown_text")),
    )
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, vector("app_mention")) == 200
        await wait_until(
            lambda: bool(fake.called("conversations.replies")), 20, "the metadata lookup"
        )
        (lookup,) = fake.called("conversations.replies")
        assert lookup.args["ts"] == MENTION_TS
        assert str(lookup.args["include_all_metadata"]).lower() in ("1", "true")
        # the core's retry asks the surface (find_sent) first: found, it is "confirmed"
        await wait_until(
            lambda: (
                sample(app, "jazz_bridge_replies_total", surface="slack", result="confirmed") >= 1
            ),
            10,
            "the reply recorded as sent (confirmed by the lookup)",
        )
        landed = [m for m in fake.thread(CHANNEL, MENTION_TS) if "incident notes" in m["text"]]
        assert len(landed) == 1
        attempts = [c for c in fake.calls if "incident notes" in str(c.args.get("markdown_text"))]
        assert len(attempts) == 1  # never resent


async def test_a_late_post_is_not_resent_before_slack_could_have_finished_it(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    env["JAZZ_BRIDGE_SLACK__API_TIMEOUT_S"] = "1"
    started: list[float] = []  # every answer post that reached Slack (each is answered)

    def reached(args: dict[str, object]) -> bool:
        if "incident notes" in str(args.get("markdown_text")):
            started.append(1.0)
        return False  # only counts: never fails a request

    fake.fail("chat.postMessage", "5xx", times=1_000_000, when=reached)
    # the answer's first post: Slack takes 3 s (the client gives up after 1 s), then posts it
    fake.fail(
        "chat.postMessage",
        "slow",
        stall_s=3.0,
        when=lambda a: "incident notes" in str(a.get("markdown_text")),
    )
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, vector("app_mention")) == 200

        def answers() -> list[dict[str, object]]:
            return [m for m in fake.thread(CHANNEL, MENTION_TS) if "incident notes" in m["text"]]

        def finished() -> int:  # answer posts Slack has carried out and answered
            return len(
                [
                    c
                    for c in fake.calls
                    if c.method == "chat.postMessage"
                    and "incident notes" in str(c.args.get("markdown_text"))
                ]
            )

        await wait_until(
            lambda: (
                sample(app, "jazz_bridge_replies_total", surface="slack", result="sent")
                + sample(app, "jazz_bridge_replies_total", surface="slack", result="confirmed")
                >= 1
            ),
            30,
            "the answer recorded as delivered",
        )
        # every post that reached Slack is done (the slow one included) before counting
        await wait_until(lambda: finished() == len(started) >= 1, 15, "Slack's posts done")
        assert len(answers()) == 1, f"the answer was posted {len(answers())} times"


async def test_a_held_progress_edit_never_lands_after_the_summary(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    """A progress edit refused by a 429 is held; when it is sent at last its request is slow,
    and the run ends meanwhile: the bubble must end on the summary, not on that stale edit
    (with its Stop button)."""
    thread = "1764670700.000100"

    def progress(args: dict[str, Any]) -> bool:
        return "working" in str(args.get("text"))

    fake.fail("chat.update", "429", retry_after=1, when=progress)
    fake.fail("chat.update", "slow", stall_s=3.0, when=progress)
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, mention("Ev0HELD", "!delay 9", ts=thread)) == 200
        await wait_post(fake, "You said", timeout=40)
        refused = next(c for c in fake.calls if c.method == "chat.update" and c.status == 429)

        def slow_one_done() -> bool:  # the held edit's slow request has been answered
            return any(
                c.at > refused.at and progress(c.args) for c in fake.called("chat.update")
            ) or not [f for f in fake.failures if f.kind == "slow" and f.times == 0]

        await wait_until(slow_one_done, 20, "the held edit's slow request answered")
        (bubble,) = [m for m in fake.thread(CHANNEL, thread) if m["ts"] == refused.args.get("ts")]
        await wait_until(lambda: str(bubble.get("text")).startswith("✓"), 10, "the summary")
        assert not [b for b in bubble.get("blocks") or [] if b.get("type") == "actions"]


async def test_the_bubbles_of_one_workspace_share_its_chat_update_budget(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    """Five long runs in one workspace want more chat.update calls than its budget (all
    their bubbles change at once): the calls Slack receives from that workspace stay within
    it, every bubble ends on its summary, never on an older state. A run in another
    workspace at the same time is not held back: its bubble shows each of its states, and
    its summary lands before its answer is posted, as with no other run about."""
    env = {**env, "JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS": "8"}
    env["JAZZ_BRIDGE_LIMITS__MAX_RUNS_PER_USER"] = "0"  # the five run at once: one person's,
    env["JAZZ_BRIDGE_LIMITS__MAX_RUNS_PER_TEAM"] = "0"  # in one workspace
    other_team, other_channel = "T0TEAM0002", "C0CHAN0002"
    busy = [f"1764671{i}00.000100" for i in range(5)]
    async with running_gateway(env) as (app, _client):
        for i, ts in enumerate(busy):
            assert await event(app.port, mention(f"Ev0BUSY{i}", "!delay 14", ts=ts)) == 200
        quiet = mention("Ev0QUIET", "!delay 14", ts="1764671900.000100", channel=other_channel)
        quiet["team_id"] = other_team
        quiet["event"]["team"] = other_team
        assert await event(app.port, quiet) == 200
        answers = await wait_post(fake, "You said", count=6, timeout=60)
        bubbles = {
            (c.args["channel"], posted_ts(fake, c)): c
            for c in fake.called("chat.postMessage")
            if buttons(c)
        }
        assert len(bubbles) == 6, seen(fake)

        def shown(channel: str, ts: str) -> str:
            (msg,) = [m for m in fake.messages[channel] if m["ts"] == ts]
            return str(msg.get("text"))

        await wait_until(
            lambda: all(shown(ch, ts).startswith("✓") for ch, ts in bubbles),
            30,
            "every bubble closed with its summary",
        )
        assert not [c for c in fake.calls if c.method == "chat.update" and c.status != 200]

        def edits(channel: str, ts: str | None = None) -> list[Call]:
            return [
                c
                for c in fake.calls
                if c.method == "chat.update"
                and c.args.get("channel") == channel
                and (ts is None or c.args.get("ts") == ts)
            ]

        # the busy workspace: within its budget over every window of its calls
        rate = (CHAT_UPDATE_PER_MINUTE - CHAT_UPDATE_BURST) / 60
        jitter = 1.0  # seconds: the calls are timed as they reach the fake, not as sent
        at = [c.at for c in edits(CHANNEL)]
        for i, first in enumerate(at):
            for j in range(i, len(at)):
                allowed = CHAT_UPDATE_BURST + (at[j] - first + jitter) * rate
                assert j - i + 1 <= allowed, f"{j - i + 1} edits in {at[j] - first:.2f}s: {at}"
        for channel, ts in bubbles:
            calls = edits(channel, ts)
            final = calls[-1]
            assert final.args["text"].startswith("✓") and not buttons(final)
            progress = [int(c.args["text"].rsplit(" ", 1)[-1].rstrip("s")) for c in calls[:-1]]
            assert progress == sorted(progress)  # never an older state after a newer one
            assert all(buttons(c) for c in calls[:-1])
        # the quiet workspace: each state shown, and the summary before the answer
        (quiet_ts,) = [ts for ch, ts in bubbles if ch == other_channel]
        quiet_edits = edits(other_channel, quiet_ts)
        assert [c.args["text"].rsplit(" ", 1)[-1] for c in quiet_edits[:-1]] == ["5s", "10s"]
        (answer,) = [c for c in answers if c.args["channel"] == other_channel]
        assert quiet_edits[-1].at < answer.at
