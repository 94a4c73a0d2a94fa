"""Crash suite: the real ``jazz-bridge serve`` with Slack and Telegram, kill -9'd at random.

Slack (HTTP mode, signed requests) and Telegram (webhook mode, secret header) run against
the adapters' local fake platforms, with a runner of this suite's own that logs every run
(``crash_runner.py``). Conversations on both platforms send their messages one after the
other, each delivered until a 2xx like the platforms do (Slack: the same ``event_id`` with
``X-Slack-Retry-Num``; Telegram: the same ``update_id``), some delivered once more after
their 2xx; meanwhile the gateway is killed with SIGKILL at seeded random moments and
started again. Once the last gateway has drained (bounded), for every acknowledged message:

* exactly one run and one answer, or exactly one "interrupted, send again" reply;
* no message ran twice; no reply was posted twice (by text, and on Slack by the reply key
  in the message metadata); answers (and interruptions) come in the order the messages
  were acknowledged in their conversation.

Slack delivers exactly once: a reply found undelivered after a restart is looked up by its
reply key before it is posted again (``ConfirmsDelivery.find_sent``). Telegram has no way
to look a message up, so one window stays at least once: a kill after Telegram accepted a
``sendMessage`` and before the gateway marked the reply sent (the store's write after the
platform's answer) makes the restarted gateway send that reply again. Such a duplicate is
counted separately (``telegram_resent_after_kill``), not failed, if and only if it is the
same reply again with a kill between its two copies; any other duplicate fails.

The counts are parameters: ``JB_CRASH_MESSAGES`` (default 1000), ``JB_CRASH_CONVERSATIONS``
(50, half on each platform), ``JB_CRASH_KILLS`` (10), ``JB_CRASH_SEED`` (random, printed),
``JB_CRASH_GAP_S`` (mean pause between a conversation's messages), ``JB_CRASH_RUN_MS``
(the runner's work, at most).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
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
    Shown,
    deliver_slack,
    deliver_telegram,
    install_runner,
    platform_env,
    runs_logged,
    slack_event,
    slack_shown,
    telegram_shown,
    tg_update,
    wait_until,
)

MESSAGES = int(os.environ.get("JB_CRASH_MESSAGES", "1000"))
CONVERSATIONS = int(os.environ.get("JB_CRASH_CONVERSATIONS", "50"))
KILLS = int(os.environ.get("JB_CRASH_KILLS", "10"))
GAP_S = float(os.environ.get("JB_CRASH_GAP_S", "0.4"))
RUN_MS = os.environ.get("JB_CRASH_RUN_MS", "20")
DUPLICATE_SHARE = 0.1  # acknowledged messages delivered once more
KILL_AFTER_S = (0.3, 3.0)  # a kill comes this long after the gateway is ready
ACK_WITHIN_S = 180.0  # a message not acknowledged by then fails the suite
DRAIN_WITHIN_S = 30.0 + MESSAGES * 0.2

pytestmark = [pytest.mark.faults, pytest.mark.timeout(int(120 + MESSAGES * 0.6 + KILLS * 20))]


@dataclass
class Message:
    token: str
    conversation: Conversation
    index: int
    payload: dict[str, Any]
    reached: int = 0  # deliveries that reached the gateway
    statuses: Counter[int] = field(default_factory=Counter)
    acked_at: float | None = None


@dataclass
class Conversation:
    platform: str  # "slack" | "telegram"
    name: str
    channel: str = ""
    thread_ts: str = ""
    chat_id: int = 0
    messages: list[Message] = field(default_factory=list)

    def shown(self, slack: FakeSlackApi, telegram: FakeBotApi) -> list[Shown]:
        if self.platform == "slack":
            return slack_shown(slack, self.channel, self.thread_ts)
        return telegram_shown(telegram, self.chat_id)


def conversations(total: int, messages: int) -> list[Conversation]:
    convs = []
    for n in range(total):
        if n % 2 == 0:
            base = 1764700000 + n
            conv = Conversation(
                "slack", f"s{n:02d}", channel=f"C0CRASH00{n % 5}", thread_ts=f"{base}.000100"
            )
        else:
            conv = Conversation("telegram", f"t{n:02d}", chat_id=500000000 + n)
        convs.append(conv)
    update_id = 700000000
    for i in range(messages):
        conv = convs[i % total]
        index = len(conv.messages)
        token = f"m-{conv.name}-{index:03d}"
        if conv.platform == "slack":
            ts = f"{conv.thread_ts.split('.')[0]}.{(index + 1) * 100:06d}"
            payload = slack_event(
                f"Ev0{conv.name.upper()}{index:04d}",
                token,
                channel=conv.channel,
                ts=ts,
                thread_ts=None if index == 0 else conv.thread_ts,
            )
        else:
            update_id += 1
            payload = tg_update(update_id, conv.chat_id, index + 1, token)
        conv.messages.append(Message(token, conv, index, payload))
    return convs


@dataclass
class Tally:
    deliveries: int = 0  # requests that reached the gateway
    redelivered: int = 0  # of those, deliveries of a message delivered before
    extra_after_ack: int = 0  # deliberate deliveries of an acknowledged message
    statuses: Counter[int] = field(default_factory=Counter)


@pytest.fixture
def env(
    tmp_path: Path,
    fake_dir: Path,
    uid_range: tuple[int, int],
    fakes: tuple[FakeSlackApi, FakeBotApi],
) -> Iterator[dict[str, str]]:
    slack, telegram = fakes
    e = platform_env(
        tmp_path / "root",
        fake_dir,
        uid_range,
        slack,
        telegram,
        JAZZ_BRIDGE_LIMITS__MAX_QUEUED_PER_CONVERSATION=str(MESSAGES),
        JAZZ_BRIDGE_RUNNER__EXTRA_ENV=json.dumps(
            {"FAKE_DIR": str(fake_dir), "CRASH_RUN_MS": RUN_MS}
        ),
        JAZZ_BRIDGE_LOG__FORMAT="text",
    )
    install_runner(e, fake_dir, "crash_runner.py")
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def deliver(
    session: aiohttp.ClientSession, gw: GatewayProcess, msg: Message, tally: Tally
) -> Outcome:
    """One delivery as the platform makes it (a retry after the first one reached)."""
    if msg.conversation.platform == "slack":
        outcome, status = await deliver_slack(session, gw.base, msg.payload, retry=msg.reached)
    else:
        outcome, status = await deliver_telegram(session, gw.base, msg.payload)
    if outcome is not Outcome.DOWN:
        if msg.reached:
            tally.redelivered += 1
        msg.reached += 1
        tally.deliveries += 1
        tally.statuses[status] += 1
        msg.statuses[status] += 1
    return outcome


async def converse(
    conv: Conversation,
    session: aiohttp.ClientSession,
    gw: GatewayProcess,
    tally: Tally,
    rng: random.Random,
) -> None:
    """Send a conversation's messages in order, each until acknowledged (like the platforms)."""
    for msg in conv.messages:
        await asyncio.sleep(rng.uniform(0, 2 * GAP_S))  # the person's pace, not a wait
        deadline = time.monotonic() + ACK_WITHIN_S
        while True:
            outcome = await deliver(session, gw, msg, tally)
            if outcome is Outcome.ACKED:
                msg.acked_at = time.monotonic()
                break
            assert time.monotonic() < deadline, f"{msg.token} not acknowledged: {msg.statuses}"
            await asyncio.sleep(0.05 if outcome is Outcome.DOWN else 0.2)  # the retry backoff
        if rng.random() < DUPLICATE_SHARE:  # the platform delivers an acknowledged one again
            tally.extra_after_ack += 1
            await deliver(session, gw, msg, tally)


async def killer(
    gw: GatewayProcess, session: aiohttp.ClientSession, rng: random.Random, kills: int
) -> None:
    for _ in range(kills):
        await asyncio.sleep(rng.uniform(*KILL_AFTER_S))  # a random moment, not a wait
        await gw.kill()
        await gw.start(session)


@dataclass
class Verdict:
    answers: int = 0
    interrupted: int = 0
    resent_after_kill: int = 0  # Telegram's documented window (see the module docstring)
    problems: list[str] = field(default_factory=list)


def judge(
    conv: Conversation, shown: list[Shown], kills: list[float], runs: Counter[str]
) -> Verdict:
    """Walk the conversation's replies against its acknowledged messages, in order."""
    verdict = Verdict()
    tokens = {m.token for m in conv.messages}
    relevant = []
    for reply in shown:
        if reply.answer_to is not None:
            if reply.answer_to not in tokens:
                verdict.problems.append(f"{conv.name}: an answer to {reply.answer_to} landed here")
                continue
            relevant.append(reply)
        elif reply.interrupted or reply.failed:
            relevant.append(reply)
    if conv.platform == "slack":
        keys = Counter(r.reply_key for r in shown)
        for key, n in keys.items():
            if key is None:
                verdict.problems.append(f"{conv.name}: a message without a reply key")
            elif n > 1:
                verdict.problems.append(f"{conv.name}: reply key {key} posted {n} times")
    answered = Counter(r.answer_to for r in relevant if r.answer_to)
    acked = [m for m in conv.messages if m.acked_at is not None]
    pos = 0
    previous: Shown | None = None
    for msg in acked:
        while True:
            if pos >= len(relevant):
                verdict.problems.append(
                    f"{conv.name}: no answer and no interruption for {msg.token}"
                )
                break
            reply = relevant[pos]
            mine = reply.answer_to == msg.token or (reply.interrupted and not answered[msg.token])
            if mine:
                pos += 1
                previous = reply
                if reply.answer_to:
                    verdict.answers += 1
                    if runs[msg.token] != 1:
                        verdict.problems.append(
                            f"{conv.name}: {msg.token} answered after {runs[msg.token]} runs"
                        )
                else:
                    verdict.interrupted += 1
                break
            if previous is not None and reply.text == previous.text:
                pos += 1
                between = any(previous.at < k < reply.at for k in kills)
                if conv.platform == "telegram" and between:
                    verdict.resent_after_kill += 1
                else:
                    verdict.problems.append(
                        f"{conv.name}: {reply.text[:40]!r} posted twice"
                        + (" (a kill between)" if between else " (no kill between)")
                    )
                continue
            pos += 1
            if reply.failed:  # an error in place of the answer: say which, stay aligned
                verdict.problems.append(f"{conv.name}: {msg.token} got {reply.text[:200]!r}")
                previous = reply
                break
            verdict.problems.append(
                f"{conv.name}: expected the reply to {msg.token}, found {reply.text[:60]!r}"
            )
    for reply in relevant[pos:]:
        if (
            previous is not None
            and reply.text == previous.text
            and conv.platform == "telegram"
            and any(previous.at < k < reply.at for k in kills)
        ):
            verdict.resent_after_kill += 1
            continue
        verdict.problems.append(f"{conv.name}: an extra reply {reply.text[:60]!r}")
    return verdict


async def test_kill_9_at_random_moments_loses_and_repeats_nothing(
    env: dict[str, str],
    tmp_path: Path,
    fake_dir: Path,
    fakes: tuple[FakeSlackApi, FakeBotApi],
    capsys: pytest.CaptureFixture[str],
) -> None:
    slack, telegram = fakes
    seed = int(os.environ.get("JB_CRASH_SEED") or secrets.randbelow(2**31))
    with capsys.disabled():
        print(f"\ncrash suite: seed {seed} (JB_CRASH_SEED={seed} repeats the schedule)")
    rng = random.Random(seed)
    convs = conversations(CONVERSATIONS, MESSAGES)
    tally = Tally()
    gw = GatewayProcess(env, tmp_path)
    t0 = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:
        try:
            await gw.start(session)
            senders = [converse(c, session, gw, tally, random.Random(rng.random())) for c in convs]
            await asyncio.gather(killer(gw, session, random.Random(rng.random()), KILLS), *senders)
            sent_s = time.monotonic() - t0

            def drained() -> bool:
                for conv in convs:
                    shown = conv.shown(slack, telegram)
                    answered = {r.answer_to for r in shown if r.answer_to}
                    told = sum(1 for r in shown if r.interrupted or r.failed)
                    if len(answered) + told < sum(1 for m in conv.messages if m.acked_at):
                        return False
                return True

            await wait_until(drained, DRAIN_WITHIN_S, "every acknowledged message answered")
        except BaseException:
            print(gw.log_tail())
            raise
        finally:
            code = await gw.stop()
    assert code == 0, gw.log_tail()
    kills = gw.kill_times()
    runs = Counter(r["prompt"] for r in runs_logged(fake_dir))
    all_tokens = {m.token for c in convs for m in c.messages}
    verdicts = {c.name: judge(c, c.shown(slack, telegram), kills, runs) for c in convs}
    problems = [p for v in verdicts.values() for p in v.problems]
    problems += [f"{t} ran {n} times" for t, n in runs.items() if n > 1]
    problems += [f"a run of an unknown prompt {t!r}" for t in runs if t not in all_tokens]
    lookups = len(slack.called("conversations.replies"))
    log = gw.log_path.read_text(errors="replace")
    errors = [line for line in log.splitlines() if " ERROR " in line]
    counts = {
        "seed": seed,
        "sent": sum(len(c.messages) for c in convs),
        "acked": sum(1 for c in convs for m in c.messages if m.acked_at is not None),
        "deliveries": tally.deliveries,
        "redelivered": tally.redelivered,
        "redelivered_after_ack": tally.extra_after_ack,
        "runs": sum(runs.values()),
        "answers": sum(v.answers for v in verdicts.values()),
        "interrupted": sum(v.interrupted for v in verdicts.values()),
        "kills": len(kills),
        "telegram_resent_after_kill": sum(v.resent_after_kill for v in verdicts.values()),
        "slack_lookups": lookups,
        "slack_found_landed": log.count("had landed before"),
        "gateway_errors": len(errors),
        "statuses": dict(sorted(tally.statuses.items())),
        "sending_s": round(sent_s, 1),
        "total_s": round(time.monotonic() - t0, 1),
    }
    with capsys.disabled():
        print("crash suite counts: " + ", ".join(f"{k}={v}" for k, v in counts.items()))
        for line in errors[:10]:
            print("  gateway error:", line[:300])
        for problem in problems[:40]:
            print("  problem:", problem)
    assert len(kills) >= KILLS
    assert counts["acked"] == counts["sent"]
    assert counts["answers"] + counts["interrupted"] == counts["acked"], counts
    assert not problems, f"{len(problems)} problem(s), first: {problems[:10]}"
