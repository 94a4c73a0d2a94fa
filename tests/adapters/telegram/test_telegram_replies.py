"""Telegram replies through the real gateway: progress, typing, commands, prompts, flood control.

The real PTB client talks to a fake Bot API; the reference runner is steered from the chat
text (``!delay``, ``!ask``, ``!artifact``, ``!long``).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest
from fake_bot_api import Failure
from tg_support import (
    ADA,
    BOT_NAME,
    FORUM,
    FORUM_CHAT,
    GRACE,
    Call,
    FakeBotApi,
    buttons,
    mention,
    post,
    press,
    private_chat,
    running_gateway,
    sample,
    seen,
    sent_to,
    texts,
    update,
    utf16,
    wait_sent,
    wait_until,
)

# PTB 22 itself warns when it builds a RetryAfter (its type becomes timedelta in v23)
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
NOT_AN_AI = "reference runner, not an AI"
EDIT_INTERVAL_S = 2.0  # the Telegram surface's declared progress edit interval


def to_chat(fake: FakeBotApi, chat: int) -> list[Call]:
    return [c for c in fake.calls if str(c.params.get("chat_id")) == str(chat)]


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


async def test_a_question_is_answered_with_its_buttons(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    chat = private_chat(ADA)
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(730001200, chat, ADA, "!ask colour?")) == 200
        (prompt,) = await wait_sent(fake, ADA, "colour?")
        choices = buttons(prompt)
        assert {"Red", "Blue", "Skip"} <= set(choices)
        assert all(len(data.encode()) <= 64 for data in choices.values())
        assert await post(app.port, press(730001201, ADA, chat, choices["Blue"])) == 200
        await wait_sent(fake, ADA, "you answered: blue")
        (answered,) = fake.called("answerCallbackQuery")
        assert answered.params["callback_query_id"] == "cq730001201"
        # the same button again: the prompt is gone, and the presser is told so
        assert await post(app.port, press(730001202, ADA, chat, choices["Red"])) == 200
        stale = fake.called("answerCallbackQuery")[-1]
        assert stale.params["show_alert"] is True and "expired" in stale.params["text"]
        assert not texts(fake, ADA, "you answered: red")


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


async def test_prompt_buttons_go_when_approve_all_answers_them_or_the_run_ends(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    chat = private_chat(ADA)

    def settled(words: str) -> list[Call]:
        return [
            c
            for c in fake.called("editMessageText")
            if words in str(c.params.get("text")) and "reply_markup" not in c.params
        ]

    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(730001600, chat, ADA, "!approve2 bash")) == 200
        first, second = await wait_sent(fake, ADA, "Approval needed", count=2)
        approve_all = next(v for k, v in buttons(second).items() if k.startswith("Approve all"))
        assert await post(app.port, press(730001601, ADA, chat, approve_all)) == 200
        await wait_sent(fake, ADA, "approved")
        # the first prompt was answered by the second's "Approve all": its buttons go too
        await wait_until(lambda: bool(settled("Approved bash")), 10, "the first prompt settled")
        assert buttons(first)  # it had buttons

        assert await post(app.port, update(730001602, chat, ADA, "!ask colour?")) == 200
        await wait_sent(fake, ADA, "colour?")
        assert await post(app.port, update(730001603, chat, ADA, "/stop")) == 200
        await wait_until(lambda: bool(settled("Expired")), 15, "the question's buttons gone")


OLD_GROUP = -4001234567
NEW_SUPERGROUP = -1004001234567


async def test_an_answer_to_a_group_upgraded_meanwhile_goes_to_the_supergroup(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """A basic group upgraded to a supergroup while its run works (an admin turns on topics,
    a public link, ...): every call to the old id is refused with ``migrate_to_chat_id``
    (PTB's ChatMigrated). It was mapped to a permanent failure, so the answer was recorded
    as failed and never posted, though Telegram said where it goes. Now the call is made
    again in the supergroup, and the thread's later calls go there directly."""
    migrated = {
        "ok": False,
        "error_code": 400,
        "description": "Bad Request: group chat was upgraded to a supergroup chat",
        "parameters": {"migrate_to_chat_id": NEW_SUPERGROUP},
    }
    methods = ("sendMessage", "editMessageText", "sendChatAction", "sendPhoto", "sendDocument")
    for method in methods:
        for _ in range(20):
            fake.failures.append(
                Failure(method, 400, migrated, lambda p: int(p["chat_id"]) == OLD_GROUP)
            )
    chat = {"id": OLD_GROUP, "type": "group", "title": "Old group"}
    async with running_gateway(env) as (app, _client):
        # 6 s: the bubble is edited and typing renewed while the run works
        assert (
            await post(app.port, mention(730300001, chat, ADA, "!delay 6 !artifact plot.png"))
            == 200
        )

        def settled() -> bool:
            failed = sample(app, "jazz_bridge_replies_total", surface="telegram", result="failed")
            return failed > 0 or bool(sent_to(fake, NEW_SUPERGROUP, "sendPhoto"))

        await wait_until(settled, 30, "the answer and its file sent or given up")
        assert texts(fake, NEW_SUPERGROUP, NOT_AN_AI), seen(fake)
        assert sent_to(fake, NEW_SUPERGROUP, "sendChatAction")
        edits = [c for c in fake.called("editMessageText") if c.params["chat_id"] == NEW_SUPERGROUP]
        assert edits, seen(fake)
        # the move is remembered: the old id was tried only by calls already under way
        old = to_chat(fake, OLD_GROUP)
        assert {c.status for c in old} == {400} and len(old) <= 2, seen(fake)


async def test_a_press_is_answered_before_the_pressed_message_is_edited(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """The button spins until its callback query is answered; the pressed message's edit
    waits for the chat's pace (seconds in a group) and may be slow. The answer used to be
    sent only after that edit: here the fake Bot API holds an edit of the question until
    the press is answered (bounded), and counts one that came before the answer."""
    chat = private_chat(ADA)
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(730001700, chat, ADA, "!ask colour?")) == 200
        (prompt,) = await wait_sent(fake, ADA, "colour?")
        prompt_id = int(prompt.result["message_id"])
        gate = fake.gate(
            "editMessageText",
            after="answerCallbackQuery",
            timeout_s=3,  # under PTB's 5 s read timeout: the old order fails, never hangs
            when=lambda p: int(p["message_id"]) == prompt_id,
        )
        blue = buttons(prompt)["Blue"]
        assert await post(app.port, press(730001701, ADA, chat, blue, prompt_id)) == 200
        await wait_sent(fake, ADA, "you answered: blue")
        (answer,) = fake.called("answerCallbackQuery")
        assert answer.params["text"] == "Answered by Ada: blue"
        edits = [c for c in fake.called("editMessageText") if c.params["message_id"] == prompt_id]
        assert edits and edits[0].params["text"] == "Answered by Ada: blue"
        assert gate.early == 0, seen(fake)
