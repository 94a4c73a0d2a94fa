"""Buttons on Telegram (callback queries), through the real gateway and PTB client against a
fake Bot API: every press is answered (``answerCallbackQuery``) before any slow work, and
its edits never hold up the next messages of anyone (in polling mode either); only the
person a prompt asks may answer it, and only they or an operator (by id or ``@username``,
named as /stop names them) may press Stop; a question's buttons go once it is answered
(by a press, by typing, by Approve all) or its run ends; the toast reads as the message
does; and a prompt Telegram refuses to show is declined at once, not waited on."""

from __future__ import annotations

from typing import Any

import pytest
from tg_support import (
    ADA,
    BOT_NAME,
    GRACE,
    GROUP,
    GROUP_CHAT,
    Call,
    FakeBotApi,
    buttons,
    mention,
    polling,
    post,
    press,
    private_chat,
    running_gateway,
    sample,
    seen,
    sent_to,
    stored,
    texts,
    update,
    vector,
    wait_sent,
    wait_until,
)

# PTB 22 itself warns when it builds a RetryAfter (its type becomes timedelta in v23)
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


READ_TIMEOUT_S = 5.0  # the adapter transport's read timeout (PTB's default)
OLD_STOP = "AAAAAAAAAAAAAAAA.stop"  # a bubble's Stop from before a restart: settled by an edit
GRACE_FROM = {"id": GRACE, "is_bot": False, "first_name": "Grace", "username": "grace"}


async def test_callbacks_only_the_requester_approves_and_every_query_is_answered(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        # a stale button: answered with an alert
        assert await post(app.port, vector("callback_query")) == 200
        (stale,) = fake.called("answerCallbackQuery")
        assert stale.params["show_alert"] is True and "expired" in stale.params["text"]

        ask = update(
            730000300,
            GROUP_CHAT,
            GRACE,
            "@jazz_example_bot !approve bash",
            entities=[{"offset": 0, "length": 17, "type": "mention"}],
        )
        assert await post(app.port, ask) == 200
        (prompt,) = await wait_sent(fake, GROUP, "Approval needed")
        buttons = [b for row in prompt.params["reply_markup"]["inline_keyboard"] for b in row]
        approve = next(b for b in buttons if b["text"] == "Approve")
        assert len(approve["callback_data"].encode()) <= 64

        def press(update_id: int, user: int) -> dict[str, Any]:
            return {
                "update_id": update_id,
                "callback_query": {
                    "id": f"cq{update_id}",
                    "from": {"id": user, "is_bot": False, "first_name": "X"},
                    "message": {
                        "message_id": 7777,
                        "chat": GROUP_CHAT,
                        "date": 1764669800,
                        "text": "Approval needed",
                    },
                    "chat_instance": "1",
                    "data": approve["callback_data"],
                },
            }

        assert await post(app.port, press(730000301, ADA)) == 200
        answers = fake.called("answerCallbackQuery")
        assert answers[-1].params["show_alert"] is True
        assert "Only" in answers[-1].params["text"]
        assert await post(app.port, press(730000302, GRACE)) == 200
        answers = fake.called("answerCallbackQuery")
        assert len(answers) == 3
        assert answers[-1].params.get("show_alert") in (False, None)
        await wait_sent(fake, GROUP, "approved")
        edits = [c for c in fake.called("editMessageText") if int(c.params["message_id"]) == 7777]
        assert edits and "reply_markup" not in edits[-1].params


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


async def test_a_question_answered_by_typing_loses_its_buttons(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """A question answered by typing ("Or reply with your own answer") loses its Red / Blue
    / Skip buttons as a pressed one does (nothing pressed it, so no adapter settled it, and
    the run's end settles only prompts still pending: it kept them for good)."""
    chat = private_chat(ADA)
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(730500001, chat, ADA, "!ask colour?")) == 200
        (prompt,) = await wait_sent(fake, ADA, "colour?")
        assert {"Red", "Blue", "Skip"} <= set(buttons(prompt))
        prompt_id = int(prompt.result["message_id"])
        assert await post(app.port, update(730500002, chat, ADA, "green")) == 200
        await wait_sent(fake, ADA, "you answered: green")

        def settled() -> bool:
            edits = fake.called("editMessageText") + fake.called("editMessageReplyMarkup")
            return any(
                int(c.params["message_id"]) == prompt_id and "reply_markup" not in c.params
                for c in edits
            )

        await wait_until(settled, 10, "the answered question's buttons removed")


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


async def test_approve_all_is_answered_before_the_other_prompts_are_edited(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, mention(730009100, GROUP_CHAT, GRACE, "!approve2 bash")) == 200
        first, second = await wait_sent(fake, GROUP, "Approval needed", count=2)
        first_id = int(first.result["message_id"])
        second_id = int(second.result["message_id"])
        approve_all = next(v for k, v in buttons(second).items() if k.startswith("Approve all"))
        # the webhook answers 200 only once the press is handled, answered and settled
        pressed = press(730009101, GRACE, GROUP_CHAT, approve_all, second_id)
        assert await post(app.port, pressed) == 200

        calls = fake.calls
        answered = next(
            i
            for i, c in enumerate(calls)
            if c.method == "answerCallbackQuery"
            and c.params.get("callback_query_id") == "cq730009101"
        )
        other_edits = [
            i
            for i, c in enumerate(calls)
            if c.method == "editMessageText" and int(c.params["message_id"]) == first_id
        ]
        assert other_edits, "the first prompt's message was settled by Approve all"
        between = [(c.method, c.params.get("message_id")) for c in calls[other_edits[0] :]]
        assert answered < other_edits[0], (
            f"answerCallbackQuery came after the edit of the other prompt's message: {between}"
        )


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


async def test_a_press_whose_edit_is_slow_leaves_the_next_message_taken_at_once(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    polling(env)
    async with running_gateway(env) as (app, _client):
        await wait_until(lambda: bool(fake.called("getUpdates")), 15, "polling started")
        # Telegram is slow to answer the edit: the client gives up after its read timeout
        fake.fail("editMessageText", "stall", stall_s=READ_TIMEOUT_S + 1)
        (stall,) = fake.faults
        # one batch: a press in the group, then Grace's message in her private chat
        fake.queue_update(press(741500001, ADA, GROUP_CHAT, OLD_STOP, message_id=4321))
        fake.queue_update(update(741500002, private_chat(GRACE), GRACE, "hello"))
        await wait_until(lambda: stall.times == 0, 10, "the pressed message's edit under way")
        (told,) = fake.called("answerCallbackQuery")
        assert "ended" in told.params["text"]

        async def taken() -> bool:
            return await stored(app) >= 1

        # taken well within the stalled edit's timeout (before: only once the edit gave up)
        await wait_until(taken, READ_TIMEOUT_S - 2, "Grace's message stored")
        await wait_sent(fake, GRACE, "hello")


async def test_the_toast_of_an_approval_reads_as_the_message_does(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    chat = private_chat(ADA)
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(730700001, chat, ADA, "!approve2 bash")) == 200
        (prompt,) = await wait_sent(fake, ADA, "write --pretend")
        approve_all = next(v for k, v in buttons(prompt).items() if k.startswith("Approve all"))
        assert await post(app.port, press(730700002, ADA, chat, approve_all)) == 200
        await wait_until(lambda: bool(fake.called("answerCallbackQuery")), 10, "the toast")
        (toast,) = fake.called("answerCallbackQuery")
        assert toast.params["text"] == "Approved write (Ada)", toast.params


async def test_a_prompt_telegram_refuses_to_show_is_declined_not_waited_on(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """The approval message is refused for good (400): nobody can answer it, so the agent
    hears "declined" at once instead of waiting (its timeout paused) with the chat held."""
    fake.fail_next("sendMessage", "button_data", when=lambda p: "Approval needed" in p["text"])
    async with running_gateway(env) as (app, _client):
        ask = update(730000400, private_chat(ADA), ADA, "!approve bash")
        assert await post(app.port, ask) == 200
        (answer,) = await wait_sent(fake, ADA, "declined", timeout=20)
        assert "bash" in answer.params["text"]
        assert not [c for c in sent_to(fake, ADA) if "Approval needed" in c.params["text"]]
        await post(app.port, update(730000401, private_chat(ADA), ADA, "and now?"))
        await wait_sent(fake, ADA, "and now?")  # the conversation was not left held


async def test_stop_button_on_the_progress_bubble(env: dict[str, str], fake: FakeBotApi) -> None:
    async with running_gateway(env) as (app, _client):
        chat = vector("private_message")["message"]["chat"]
        assert await post(app.port, update(730000700, chat, ADA, "!delay 20")) == 200

        def bubble() -> list[Call]:
            return [c for c in sent_to(fake, ADA) if c.params.get("reply_markup")]

        await wait_until(lambda: bool(bubble()), 15, "a progress bubble with a Stop button")
        (stop,) = [b for row in bubble()[0].params["reply_markup"]["inline_keyboard"] for b in row]
        assert stop["text"] == "Stop"
        await wait_until(lambda: bool(fake.called("sendChatAction")), 10, "typing")
        bubble_id = 5000  # the fake's first message id: the bubble is the first message sent
        # someone else's press (say, the link was forwarded): an alert, the run goes on
        assert await post(app.port, press(730000701, GRACE, chat, stop["callback_data"])) == 200
        refused = fake.called("answerCallbackQuery")[-1]
        assert refused.params["show_alert"] is True and "Only" in refused.params["text"]
        assert sample(app, "jazz_bridge_runs_total", outcome="interrupted") == 0
        assert await post(app.port, press(730000702, ADA, chat, stop["callback_data"])) == 200
        await wait_sent(fake, ADA, "Stopped by Ada.")  # the name /stop shows, not the raw id
        assert fake.called("answerCallbackQuery")[-1].params.get("show_alert") in (False, None)
        assert len(fake.called("answerCallbackQuery")) == 2
        await wait_until(
            lambda: sample(app, "jazz_bridge_runs_total", outcome="interrupted") == 1, 10, "stop"
        )
        closing = [
            c for c in fake.called("editMessageText") if int(c.params["message_id"]) == bubble_id
        ][-1]
        assert closing.params["text"].startswith("✗") and "reply_markup" not in closing.params


async def test_an_operator_who_presses_stop_is_named_not_shown_as_a_number(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """Stop pressed by the requester reads "Stopped by Ada." (the name /stop shows); pressed
    by an operator (``telegram.operators``) it reads "Stopped by 222222222.": ``press`` gets
    only the presser's id, and the adapter has the name (``query.from_user``) but no way to
    pass it. /stop by the same operator says "Stopped by Grace."."""
    env["JAZZ_BRIDGE_TELEGRAM__OPERATORS"] = f"[{GRACE}]"
    async with running_gateway(env) as (app, _client):
        chat = private_chat(ADA)
        assert await post(app.port, update(730009300, chat, ADA, "!delay 20")) == 200

        def bubble() -> list[Call]:
            return [c for c in sent_to(fake, ADA) if c.params.get("reply_markup")]

        await wait_until(lambda: bool(bubble()), 15, "a progress bubble with a Stop button")
        stop = buttons(bubble()[0])["Stop"]
        grace = press(730009301, GRACE, chat, stop)
        grace["callback_query"]["from"]["first_name"] = "Grace"
        assert await post(app.port, grace) == 200
        (stopped,) = await wait_sent(fake, ADA, "Stopped by")
        assert "Stopped by Grace" in stopped.params["text"], stopped.params["text"]


def with_stop(fake: FakeBotApi) -> list[Call]:
    return [c for c in sent_to(fake, GROUP) if c.params.get("reply_markup")]


async def test_an_operator_named_by_username_may_stop_anothers_run(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    env["JAZZ_BRIDGE_TELEGRAM__OPERATORS"] = '["@Grace"]'
    async with running_gateway(env) as (app, _client):
        # Ada's run, stopped by Grace's press on its Stop button
        assert await post(app.port, mention(730043001, GROUP_CHAT, ADA, "!delay 20")) == 200
        await wait_until(lambda: bool(with_stop(fake)), 15, "a progress bubble with Stop")
        pressed = press(730043002, GRACE, GROUP_CHAT, buttons(with_stop(fake)[0])["Stop"])
        pressed["callback_query"]["from"] = GRACE_FROM
        assert await post(app.port, pressed) == 200
        await wait_sent(fake, GROUP, "Stopped by Grace")
        # Ada's next run, stopped by Grace's /stop
        assert await post(app.port, mention(730043003, GROUP_CHAT, ADA, "!delay 20")) == 200
        await wait_until(lambda: len(with_stop(fake)) >= 2, 15, "a second progress bubble")
        stop = update(730043004, GROUP_CHAT, GRACE, f"/stop@{BOT_NAME}")
        stop["message"]["from"] = GRACE_FROM
        assert await post(app.port, stop) == 200
        await wait_sent(fake, GROUP, "Stopped by Grace", count=2)
