"""Telegram replies through the real gateway: progress, typing, commands, answers, flood control.

The real PTB client talks to a fake Bot API; the reference runner is steered from the chat
text (``!delay``, ``!ask``, ``!artifact``, ``!long``). A run shows one progress bubble (its
Stop button, edited at most every 2 s, closed by the run's summary) and typing, in a forum
topic too; the commands work also as ``/cmd@botname`` and never reach the runner; an answer
is split under Telegram's limit, sent once through a 429 (progress dropped meanwhile, the
answers waiting for the cooldown), and sent as plain text when Telegram refuses its
formatting."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest
from tg_support import (
    ADA,
    BOT_NAME,
    FORUM,
    FORUM_CHAT,
    GRACE,
    NOT_AN_AI,
    Call,
    FakeBotApi,
    buttons,
    mention,
    post,
    private_chat,
    running_gateway,
    sample,
    seen,
    sent_to,
    texts,
    to_chat,
    update,
    utf16,
    vector,
    wait_sent,
    wait_until,
)

# PTB 22 itself warns when it builds a RetryAfter (its type becomes timedelta in v23)
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


EDIT_INTERVAL_S = 2.0  # the Telegram surface's declared progress edit interval


async def test_a_run_in_a_forum_topic_shows_progress_typing_and_files_in_that_topic(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    topic = {"message_thread_id": 42, "is_topic_message": True}
    async with running_gateway(env) as (app, _client):
        # 8 s: the bubble shows elapsed time in 5 s steps, so it is edited at least once
        ask = mention(730001000, FORUM_CHAT, ADA, "!delay 8 !artifact plot.png", **topic)
        assert await post(app.port, ask) == 200
        (answer,) = await wait_sent(fake, FORUM, NOT_AN_AI)
        await wait_until(lambda: bool(sent_to(fake, FORUM, "sendPhoto")), 20, "the artifact")

        # every call into the forum chat that can carry a topic carries this one
        for call in to_chat(fake, FORUM):
            if call.method in ("sendMessage", "sendChatAction", "sendPhoto", "sendDocument"):
                assert int(call.params["message_thread_id"]) == 42, (call.method, call.params)
        # typing renewed while the run works (every ~4 s: at least twice in 6 s)
        typing = sent_to(fake, FORUM, "sendChatAction")
        assert len(typing) >= 2 and {c.params["action"] for c in typing} == {"typing"}
        # one progress bubble with a Stop button, edited at most every 2 s, closed by the summary
        bubbles = [c for c in sent_to(fake, FORUM) if c.params.get("reply_markup")]
        assert len(bubbles) == 1 and list(buttons(bubbles[0])) == ["Stop"]
        edits = [
            c
            for c in fake.called("editMessageText")
            if int(c.params["chat_id"]) == FORUM and c.status == 200
        ]
        progress = [c for c in edits if c.params.get("reply_markup")]
        assert progress, seen(fake)
        for a, b in itertools.pairwise(progress):
            assert b.at - a.at >= EDIT_INTERVAL_S - 0.1
        closing = edits[-1]
        assert "reply_markup" not in closing.params and closing.params["text"].startswith("✓")
        assert closing.at <= answer.at  # the summary closes the bubble before the answer
        # the answer is a new message; the photo came from the topic's own home
        assert "reply_markup" not in answer.params
        (photo,) = sent_to(fake, FORUM, "sendPhoto")
        assert photo.params["photo"]["filename"] == "plot.png"
        topic_home = await asyncio.to_thread(app.provisioned.homes.ensure, f"telegram:{FORUM}:42")
        general_home = await asyncio.to_thread(app.provisioned.homes.ensure, f"telegram:{FORUM}")
        assert topic_home.path != general_home.path
        assert topic_home.account.uid != general_home.account.uid
        assert (topic_home.path / "workspace" / "plot.png").is_file()
        assert not (general_home.path / "workspace" / "plot.png").exists()


async def test_commands_start_new_stop_also_as_cmd_at_botname(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    chat = private_chat(ADA)
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(730001100, chat, ADA, "/start")) == 200
        await wait_sent(fake, ADA, "/new")
        assert await post(app.port, update(730001101, chat, ADA, "hello")) == 200
        await wait_sent(fake, ADA, "Earlier turns in this conversation: 0")
        assert await post(app.port, update(730001102, chat, ADA, "again")) == 200
        await wait_sent(fake, ADA, "Earlier turns in this conversation: 1")
        assert await post(app.port, update(730001103, chat, ADA, f"/new@{BOT_NAME}")) == 200
        await wait_sent(fake, ADA, "Started a fresh conversation")
        assert await post(app.port, update(730001104, chat, ADA, "after new")) == 200
        await wait_sent(fake, ADA, "Earlier turns in this conversation: 0", count=2)
        assert await post(app.port, update(730001105, chat, ADA, "/stop")) == 200
        await wait_sent(fake, ADA, "Nothing is running")
        before = len(sent_to(fake, ADA))
        assert await post(app.port, update(730001106, chat, ADA, "!delay 30")) == 200
        await wait_until(
            lambda: any(c.params.get("reply_markup") for c in sent_to(fake, ADA)[before:]),
            15,
            "this run's progress bubble",
        )
        assert await post(app.port, update(730001107, chat, ADA, f"/stop@{BOT_NAME}")) == 200
        await wait_sent(fake, ADA, "Stopped by Ada.")
        await wait_sent(fake, ADA, "⏹️ Stopped.")
        await wait_until(
            lambda: sample(app, "jazz_bridge_runs_total", outcome="interrupted") == 1,
            15,
            "the run stopped",
        )
        # each command was answered once, and none of them reached the runner
        assert len(texts(fake, ADA, "Started a fresh conversation")) == 1
        assert not texts(fake, ADA, "You said:\n/")


async def test_the_bubble_says_who_is_waited_for_and_typing_stops_while_the_person_thinks(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        # a shared chat: the secret is refused at once, so nobody is waited for after that
        ask = mention(730001500, FORUM_CHAT, ADA, "!secret API_KEY !delay 8")
        assert await post(app.port, ask) == 200
        (refused,) = await wait_sent(fake, FORUM, "never collected in a shared chat")
        await wait_sent(fake, FORUM, NOT_AN_AI, timeout=30)
        lines = [
            str(c.params.get("text"))
            for c in fake.calls
            if c.method in ("sendMessage", "editMessageText") and c.at > refused.at
        ]
        assert lines and not [t for t in lines if "waiting for you" in t], lines

        # a private question nobody answers yet: "waiting for you", and no "typing…"
        question_update = update(730001501, private_chat(ADA), ADA, "!ask colour?")
        assert await post(app.port, question_update) == 200
        (question,) = await wait_sent(fake, ADA, "colour?")
        await wait_until(
            lambda: any(
                "waiting for you · 5s" in str(c.params.get("text"))
                for c in fake.called("editMessageText")
            ),
            20,
            "the bubble waiting for 5 s",
        )
        typing = [c for c in sent_to(fake, ADA, "sendChatAction") if c.at > question.at + 0.5]
        assert typing == [], [c.at - question.at for c in typing]


async def test_long_answer_is_split_under_telegram_limit(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        chat = vector("private_message")["message"]["chat"]
        assert await post(app.port, update(730000500, chat, ADA, "!long 9000")) == 200
        await wait_until(
            lambda: sample(app, "jazz_bridge_runs_total", outcome="ok") == 1, 30, "the run"
        )

        async def all_sent() -> bool:
            return not await app.store.undelivered_replies()

        await wait_until(all_sent, 30, "every part sent")
        answer = [c for c in sent_to(fake, ADA) if not c.params.get("reply_markup")]  # no bubble
        assert len(answer) >= 3
        code_blocks = 0
        for call in answer:
            text = call.params["text"]
            assert utf16(text) <= 4096
            assert "```" not in text  # fences became entities, none was cut open
            for e in call.params.get("entities") or []:
                assert e["offset"] >= 0 and e["offset"] + e["length"] <= utf16(text)
                code_blocks += e["type"] == "pre"
        assert code_blocks >= 2


async def test_a_429_is_honoured_and_the_answer_is_sent_exactly_once(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    fake.fail_next("sendMessage", "429", when=lambda p: "calendar" in p.get("text", ""))
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, vector("private_message")) == 200
        await wait_sent(fake, ADA, "calendar")
        refused = [c for c in fake.calls if c.method == "sendMessage" and c.status == 429]
        assert len(refused) == 1
        (ok,) = [c for c in sent_to(fake, ADA) if "calendar" in c.params["text"]]
        assert ok.at - refused[0].at >= 0.9  # waited out retry_after
        await wait_until(
            lambda: (
                sample(app, "jazz_bridge_replies_total", surface="telegram", result="sent") >= 1
            ),
            10,
            "the reply recorded as sent",
        )
        assert len([c for c in sent_to(fake, ADA) if "calendar" in c.params["text"]]) == 1


async def test_after_a_429_progress_is_dropped_and_answers_wait_for_the_cooldown(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    cooldown = 3
    fake.fail_next("editMessageText", "429", retry_after=cooldown)
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(730001300, private_chat(ADA), ADA, "!delay 6")) == 200
        await wait_until(
            lambda: any(c.status == 429 for c in fake.calls), 20, "a 429 on a progress edit"
        )
        (refused,) = [c for c in fake.calls if c.status == 429]
        # another chat's command during the bot-wide cooldown: delayed, never dropped
        assert await post(app.port, update(730001301, private_chat(GRACE), GRACE, "/status")) == 200
        (status,) = await wait_sent(fake, GRACE, "Idle")
        (answer,) = await wait_sent(fake, ADA, NOT_AN_AI)
        window = (refused.at, refused.at + cooldown - 0.1)
        during = [c for c in fake.calls if window[0] < c.at < window[1]]
        assert not [c for c in during if c.method != "getUpdates"], [
            (c.method, c.at - refused.at) for c in during
        ]
        assert status.at >= window[1] and answer.at >= window[1]
        await wait_until(
            lambda: (
                sample(app, "jazz_bridge_replies_total", surface="telegram", result="sent") == 2
            ),
            10,
            "the status and the answer recorded as sent",
        )
        assert len(texts(fake, ADA, NOT_AN_AI)) == 1 and len(texts(fake, GRACE, "Idle")) == 1


async def test_a_run_that_ends_during_a_cooldown_has_its_bubble_closed_after_it(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    cooldown = 8  # longer than the rest of the run: it ends while edits are held
    fake.fail_next("editMessageText", "429", retry_after=cooldown)
    async with running_gateway(env) as (app, _client):
        # 8 s: the bubble's elapsed time moves in 5 s steps, so its first edit (the one
        # refused) comes at ~6 s, and the run ends while the cooldown still holds edits
        assert await post(app.port, update(730001350, private_chat(ADA), ADA, "!delay 8")) == 200
        await wait_until(
            lambda: any(c.status == 429 for c in fake.calls), 20, "a 429 on a progress edit"
        )
        (refused,) = [c for c in fake.calls if c.status == 429]
        assert refused.method == "editMessageText" and refused.params.get("reply_markup")
        bubble = refused.params["message_id"]

        def bubble_edits() -> list[Call]:
            return [c for c in fake.called("editMessageText") if c.params["message_id"] == bubble]

        await wait_until(
            lambda: sample(app, "jazz_bridge_runs_total", outcome="ok") == 1, 20, "the run"
        )
        assert time.monotonic() < refused.at + cooldown, "the run outlived the cooldown"
        await wait_until(
            lambda: any(c.params["text"].startswith("✓") for c in bubble_edits()),
            cooldown + 10,
            "the bubble closed with the summary",
        )
        (answer,) = await wait_sent(fake, ADA, NOT_AN_AI)
        # nothing at all during the cooldown; after it, only the newest edit: the summary
        window = (refused.at, refused.at + cooldown - 0.1)
        during = [c for c in fake.calls if window[0] < c.at < window[1]]
        assert not during, [(c.method, c.at - refused.at) for c in during]
        (closing,) = [c for c in bubble_edits() if c.at > refused.at]
        assert closing.params["text"].startswith("✓") and "reply_markup" not in closing.params
        assert answer.at >= window[1]


async def test_a_429_in_the_middle_of_a_long_answer_sends_nothing_twice(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    chat = private_chat(ADA)

    # 2,100 astral characters (4,200 UTF-16 units) quoted back make one reply longer than a
    # Telegram message: the surface splits it in two. A 429 on the second message:
    def second_message_of_the_reply(p: dict[str, Any]) -> bool:
        return "😀" in p.get("text", "") and NOT_AN_AI not in p["text"]

    # `!long 9000` is split by the core into several replies. A 429 on the second one:
    def second_reply(p: dict[str, Any]) -> bool:
        text = p.get("text", "")
        return "Paragraph" in text and NOT_AN_AI not in text and not p.get("reply_markup")

    fake.fail_next("sendMessage", "429", when=second_message_of_the_reply)
    fake.fail_next("sendMessage", "429", when=second_reply)
    async with running_gateway(env) as (app, _client):

        async def all_sent(runs: int) -> bool:
            return (
                sample(app, "jazz_bridge_runs_total", outcome="ok") == runs
                and not await app.store.undelivered_replies()
            )

        assert await post(app.port, update(730001400, chat, ADA, "😀" * 2100)) == 200
        await wait_until(lambda: all_sent(1), 40, "the first answer sent")
        assert await post(app.port, update(730001401, chat, ADA, "!long 9000")) == 200
        await wait_until(lambda: all_sent(2), 40, "the second answer sent")
        refused = [c for c in fake.calls if c.status == 429]
        assert len(refused) == 2, seen(fake)
        answer = [c for c in sent_to(fake, ADA) if not c.params.get("reply_markup")]
        sent = [c.params["text"] for c in answer]
        assert len(sent) == len(set(sent)), "a part was sent twice"
        for r in refused:
            assert sent.count(r.params["text"]) == 1  # resent once, after the 429
        assert len(answer) >= 5
        # in order: the split reply's two messages, then the long answer's replies
        assert NOT_AN_AI in sent[0] and "😀" in sent[1]
        first, second = (sent.index(r.params["text"]) for r in refused)
        assert first == 1 and second > first + 1 and NOT_AN_AI in sent[second - 1]
        for call in answer:
            length = utf16(call.params["text"])
            assert length <= 4096
            for e in call.params.get("entities") or []:
                assert e["offset"] >= 0 and e["offset"] + e["length"] <= length


async def test_refused_formatting_is_resent_as_plain_text(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    fake.fail_next("sendMessage", "entities", when=lambda p: bool(p.get("entities")))
    async with running_gateway(env) as (app, _client):
        assert (
            await post(
                app.port,
                update(730000400, vector("private_message")["message"]["chat"], ADA, "/help"),
            )
            == 200
        )
        (plain,) = await wait_sent(fake, ADA, "jazz-bridge")
        assert not plain.params.get("entities") and not plain.params.get("parse_mode")
        assert "/new" in plain.params["text"]
        refused = [c for c in fake.calls if c.status == 400]
        assert len(refused) == 1 and refused[0].params.get("entities")
