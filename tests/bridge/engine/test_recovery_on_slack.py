"""Slack: an answer whose chat.postMessage Slack was still carrying out when the gateway was
killed is not posted a second time by the restarted gateway.

The surface knows Slack may still be working on a request the client gave up on, and
believes "not in the thread" only IN_FLIGHT_GRACE_S (10 s) after such a request. That
memory lived only in the process: after a kill -9 in the middle of a post, the restarted
gateway found the answer undelivered (``pending``), looked it up by its reply key at once
(Slack had not finished the first post yet, so it was not there), and posted it again; the
first post then landed too. Two copies of the answer, on the one platform that can tell.

The real ``jazz-bridge serve`` with Slack on a fake Web API that is slow with the answer's
post (``platforms_support``, as the crash suite uses it).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from accounts_support import remove_accounts
from platforms_support import (
    FakeBotApi,
    FakeSlackApi,
    GatewayProcess,
    Outcome,
    deliver_slack,
    platform_env,
    running_fakes,
    slack_event,
    wait_until,
)

from bridge.store import SqliteStore

STALL_S = 7.0  # Slack's work on the post: well inside the 10 s the surface itself allows
CHANNEL = "C0CHAN0001"
THREAD = "1764669600.000100"


def _is_answer(args: dict[str, Any]) -> bool:
    return '"answer:' in json.dumps(args.get("metadata") or {})


class SlowSlack(FakeSlackApi):
    """The fake Slack, noting when the post it was slow with has been carried out."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.answer_arrived = asyncio.Event()
        self.arrived_at = 0.0
        self.answer_posts_done: list[float] = []  # when each answer post was carried out

    def _m_chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        result = super()._m_chat_postMessage(args)
        if _is_answer(args):
            self.answer_posts_done.append(time.monotonic())
        return result


@pytest.fixture
async def fakes() -> AsyncIterator[tuple[FakeSlackApi, FakeBotApi]]:
    async with running_fakes() as (slack, telegram):
        slow = SlowSlack(slack.bot_token)
        await slow.start()
        try:
            yield slow, telegram
        finally:
            await slow.stop()


@pytest.fixture
def env(
    tmp_path: Path,
    fake_dir: Path,
    uid_range: tuple[int, int],
    fakes: tuple[FakeSlackApi, FakeBotApi],
) -> Iterator[dict[str, str]]:
    slack, telegram = fakes
    yield platform_env(tmp_path / "root", fake_dir, uid_range, slack, telegram)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def _answers_in_thread(slack: FakeSlackApi) -> list[str]:
    keys = []
    for msg in slack.thread(CHANNEL, THREAD):
        key = ((msg.get("metadata") or {}).get("event_payload") or {}).get("reply_key")
        if isinstance(key, str) and key.startswith("answer:"):
            keys.append(key)
    return keys


async def _undelivered(db: Path) -> int:
    store = SqliteStore(db, read_only=True)
    await store.open()
    try:
        return len(await store.undelivered_replies())
    finally:
        await store.close()


async def test_an_answer_slack_was_still_posting_at_a_kill_is_not_posted_twice(
    env: dict[str, str], tmp_path: Path, fakes: tuple[SlowSlack, FakeBotApi]
) -> None:
    slack, _ = fakes

    def slow_answer(args: dict[str, Any]) -> bool:
        if _is_answer(args):
            slack.arrived_at = time.monotonic()
            slack.answer_arrived.set()
            return True
        return False

    slack.fail("chat.postMessage", "slow", stall_s=STALL_S, when=slow_answer)
    gw = GatewayProcess(env, tmp_path)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:
        await gw.start(session)
        try:
            body = slack_event("Ev001", "hello", channel=CHANNEL, ts=THREAD, thread_ts=None)
            outcome, status = await deliver_slack(session, gw.base, body, retry=0)
            assert outcome is Outcome.ACKED, status
            # the answer's post reached Slack, which is still carrying it out: kill -9
            await asyncio.wait_for(slack.answer_arrived.wait(), 30)
            killed_at = time.monotonic()
            await gw.kill()
            await gw.start(session)
            restarted_in = time.monotonic() - killed_at
            assert restarted_in < STALL_S, f"the restart took {restarted_in:.1f}s: no window"
            db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"

            async def settled() -> bool:
                # Slack carried out the post it was slow with, and the restarted gateway has
                # the answer marked delivered (found, or sent again)
                slow_done = any(
                    at >= slack.arrived_at + STALL_S - 0.1 for at in slack.answer_posts_done
                )
                return slow_done and await _undelivered(db) == 0

            await wait_until(settled, 40, "the answer to be settled after the restart")
        finally:
            await gw.stop()
    answers = _answers_in_thread(slack)
    assert len(answers) == 1, f"the answer was posted {len(answers)} times in the thread: {answers}"
