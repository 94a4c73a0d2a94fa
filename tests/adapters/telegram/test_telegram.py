"""The Telegram adapter's intake and basics: the real PTB client and the real gateway
against a fake Bot API (webhook mode unless a test says otherwise)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tg_support import (
    ADA,
    BOT,
    BOT_NAME,
    FORUM,
    GRACE,
    GROUP,
    GROUP_CHAT,
    SECRET,
    Call,
    FakeBotApi,
    post,
    press,
    private_chat,
    running_gateway,
    sample,
    sent_to,
    stored,
    update,
    utf16,
    vector,
    wait_sent,
    wait_until,
)

from bridge.model import InboxState

# PTB 22 itself warns when it builds a RetryAfter (its type becomes timedelta in v23)
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


# -- intake ------------------------------------------------------------------------------------


async def test_a_webhook_telegram_refused_at_start_is_set_again(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """setWebhook failed at start (a 5xx): until it is set Telegram delivers nothing, so it
    is tried again (the failure in /healthz meanwhile) instead of waiting for a restart."""
    fake.fail("setWebhook", "5xx")
    async with running_gateway(env) as (app, _client):
        await wait_until(lambda: bool(fake.webhook_url), 15, "the webhook set on a later try")
        assert fake.called("setWebhook", ok=False)
        assert fake.webhook_url == env["JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL"]
        (telegram,) = [a for a in app.adapters if a.name == "telegram"]
        assert telegram.health() is None


async def test_webhook_refuses_a_wrong_or_missing_secret_and_bad_json(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, vector("private_message"), secret=None) == 403
        assert await post(app.port, vector("private_message"), secret="wrong") == 403
        assert (
            sample(app, "jazz_bridge_auth_failures_total", platform="telegram", reason="secret")
            == 2
        )
        assert await stored(app) == 0
        assert await post(app.port, None, raw=b"{not json") == 400
        assert await post(app.port, [1, 2]) == 400  # JSON, but not an update
        assert await post(app.port, {"update_id": "seven", "message": {}}) == 400
        assert await stored(app) == 0
        assert not fake.called("sendMessage")
        # the webhook was set with the secret at start, for the updates the adapter reads
        (hook,) = fake.called("setWebhook")
        assert hook.params["secret_token"] == SECRET
        assert hook.params["url"] == env["JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL"]
        assert set(hook.params["allowed_updates"]) == {
            "message",
            "edited_message",
            "callback_query",
        }
        assert not fake.called("getUpdates")
        # and the right secret is let in
        assert await post(app.port, vector("private_message")) == 200
        assert await stored(app) == 1


async def test_private_message_runs_once_even_when_redelivered(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        body = vector("private_message")
        # Telegram redelivers an update whose 200 it did not see, even while the first runs
        first = await asyncio.gather(post(app.port, body), post(app.port, body))
        assert first == [200, 200]
        (answer,) = await wait_sent(fake, ADA, "calendar")
        assert "reference runner" in answer.params["text"].lower()
        assert answer.params.get("entities")  # Markdown went out as entities
        await wait_until(
            lambda: sample(app, "jazz_bridge_runs_total", outcome="ok") == 1, 20, "one run"
        )
        assert await post(app.port, body) == 200  # and again after it ran
        assert (
            sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="duplicate") == 2
        )
        assert sample(app, "jazz_bridge_runs_total", outcome="ok") == 1
        assert len(await app.store.messages_in_state(InboxState.DONE)) == 1
        assert len([c for c in sent_to(fake, ADA) if "calendar" in c.params["text"]]) == 1


async def test_forum_topic_is_its_own_conversation_and_replies_go_to_the_topic(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, vector("forum_topic")) == 200  # /status
        (reply,) = await wait_sent(fake, FORUM, "Idle")
        assert int(reply.params["message_thread_id"]) == 42
        plain = update(
            730000100, {"id": FORUM, "type": "supergroup", "is_forum": True}, ADA, "/status"
        )
        assert await post(app.port, plain) == 200  # the General topic: another conversation
        await wait_sent(fake, FORUM, "Idle", count=2)
        keys = {m.thread_key for m in await app.store.messages_in_state(InboxState.DONE)}
        assert keys == {f"telegram:{FORUM}:42", f"telegram:{FORUM}"}
        general = [c for c in sent_to(fake, FORUM) if "message_thread_id" not in c.params]
        assert len(general) == 1


async def test_group_needs_a_mention_and_edits_are_not_turns(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        chatter = update(730000200, GROUP_CHAT, GRACE, "just chatting among humans")
        assert await post(app.port, chatter) == 200
        assert await post(app.port, vector("edited_message")) == 200
        other_bot = update(730000201, GROUP_CHAT, GRACE, "/status@some_other_bot")
        assert await post(app.port, other_bot) == 200
        assert (
            sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="ignored") == 3
        )
        assert await stored(app) == 0
        assert await post(app.port, vector("group_mention")) == 200
        (answer,) = await wait_sent(fake, GROUP, "check the backup logs")
        assert "@jazz_example_bot" not in answer.params["text"]
        assert answer.params["reply_parameters"]["message_id"] == 88
        command = update(730000202, GROUP_CHAT, GRACE, "/status@jazz_example_bot")
        assert await post(app.port, command) == 200
        await wait_sent(fake, GROUP, "Idle")
        # a reply to one of the bot's messages is addressed to it, without a mention
        bot_message = {
            "message_id": 5001,
            "from": {"id": BOT, "is_bot": True, "first_name": "Jazz", "username": BOT_NAME},
            "chat": GROUP_CHAT,
            "date": 1764669700,
            "text": "an earlier answer",
        }
        follow_up = update(
            730000203, GROUP_CHAT, GRACE, "and the restore logs?", reply_to_message=bot_message
        )
        assert await post(app.port, follow_up) == 200
        await wait_sent(fake, GROUP, "and the restore logs?")
        # a reply to another person is not
        human = {**bot_message, "from": {"id": ADA, "is_bot": False, "first_name": "Ada"}}
        aside = update(730000204, GROUP_CHAT, GRACE, "agreed, thanks", reply_to_message=human)
        assert await post(app.port, aside) == 200
        assert (
            sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="ignored") == 4
        )
        assert not sent_to(fake, ADA)  # the edited private message never ran
        await wait_until(
            lambda: sample(app, "jazz_bridge_runs_total", outcome="ok") == 2, 20, "two runs"
        )
        assert not [c for c in sent_to(fake, GROUP) if "agreed" in c.params["text"]]


async def test_private_chats_take_every_message_and_groups_all_with_the_all_trigger(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    env["JAZZ_BRIDGE_TELEGRAM__GROUP_TRIGGER"] = "all"
    async with running_gateway(env) as (app, _client):
        chat = vector("private_message")["message"]["chat"]
        assert await post(app.port, update(730000250, chat, ADA, "no mention here")) == 200
        await wait_sent(fake, ADA, "no mention here")
        chatter = update(730000251, GROUP_CHAT, GRACE, "plain group chatter")
        assert await post(app.port, chatter) == 200
        (answer,) = await wait_sent(fake, GROUP, "plain group chatter")
        assert answer.params["reply_parameters"]["message_id"] == 251
        other_bot = update(730000252, GROUP_CHAT, GRACE, "/status@some_other_bot")
        assert await post(app.port, other_bot) == 200  # still not for this bot
        assert (
            sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="ignored") == 1
        )


async def test_indented_code_in_a_private_message_reaches_the_agent_unchanged(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """Only the gap a removed @mention leaves is tidied: every run of two spaces anywhere
    used to become one, so Python, YAML or a Makefile sent to a coding agent lost its
    indentation, even in a private chat with no mention at all."""
    code = "Why does this fail?\n\ndef f(x):\n    if x:\n        return 1\n\treturn 2"
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(730100001, private_chat(ADA), ADA, code)) == 200
        await wait_sent(fake, ADA, "Why does this fail")

        async def done_texts() -> list[str]:
            return [m.text for m in await app.store.messages_in_state(InboxState.DONE)]

        async def one_done() -> bool:
            return len(await done_texts()) == 1

        await wait_until(one_done, 20, "the message recorded as done")
        assert await done_texts() == [code]


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


# -- replies -----------------------------------------------------------------------------------


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


async def test_set_my_commands_only_when_the_list_changed(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env):
        pass
    async with running_gateway(env) as (app, _client):
        assert len(fake.called("setMyCommands")) == 1  # the same list: not sent again
        # as after an upgrade that changed the list: the stored digest no longer matches
        await app.store.set_kv(f"telegram:{BOT}:commands-sha256", "an older list")
    async with running_gateway(env):
        pass
    assert len(fake.called("setMyCommands")) == 2
    assert len(fake.called("setWebhook")) == 3
    names = [c["command"] for c in fake.called("setMyCommands")[-1].params["commands"]]
    assert names == ["start", "help", "new", "status", "stop"]


async def test_document_is_downloaded_into_the_home(env: dict[str, str], fake: FakeBotApi) -> None:
    body = vector("document")
    fake.add_file(body["message"]["document"]["file_id"], "documents/file_1.pdf", b"%PDF-1.4 x")
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, body) == 200
        (answer,) = await wait_sent(fake, ADA, "summarize this")
        assert "Attachments: 1" in answer.params["text"]
        assert fake.called("getFile")
        home = await asyncio.to_thread(app.provisioned.homes.ensure, f"telegram:{ADA}")
        (saved,) = (home.path / "workspace" / "attachments").glob("*report.pdf")
        assert saved.read_bytes() == b"%PDF-1.4 x"
        st = saved.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (
            home.account.uid,
            home.operator_gid,
            0o640,
        )
        # the runner got the path, from its working directory (the workspace)
        assert f"attachments/{saved.name}: 10 bytes" in answer.params["text"]
        assert str(home.path) not in answer.params["text"]


# -- polling -----------------------------------------------------------------------------------


async def test_polling_runs_updates_and_persists_the_offset(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    del env["JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL"]
    env["JAZZ_BRIDGE_TELEGRAM__POLL_TIMEOUT_S"] = "1"
    fake.queue_update(vector("private_message"))
    async with running_gateway(env) as (app, _client):
        await wait_sent(fake, ADA, "calendar")
        key = f"telegram:{BOT}:offset"

        async def persisted() -> bool:
            return await app.store.get_kv(key) == "730000002"

        await wait_until(persisted, 10, "the offset persisted")
        assert fake.called("deleteWebhook") and not fake.called("setWebhook")
        fake.queue_update(vector("private_message"))  # redelivered after a lost ack
        await wait_until(lambda: len(fake.called("getUpdates")) >= 3, 10, "polled again")
        assert len([c for c in sent_to(fake, ADA) if "calendar" in c.params["text"]]) == 1
        # the stored offset is a paced restart hint (one write, then at most one a second):
        # the second of two quick updates is stored by stop(), not lost with the pace
        for n, text in ((7, "and the weather?"), (8, "and the tides?")):
            later = copy.deepcopy(vector("private_message"))
            later["update_id"] = 730000000 + n
            later["message"]["message_id"] += n
            later["message"]["text"] = text
            fake.queue_update(later)
            await wait_sent(fake, ADA, text.split()[-1])  # its batch is done, the offset due
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        (stored,) = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
    assert stored == "730000009"
    # a restart goes on from the stored offset
    polls = len(fake.called("getUpdates"))
    async with running_gateway(env) as (app, _client):
        await wait_until(lambda: len(fake.called("getUpdates")) > polls, 10, "polled after restart")
        assert fake.called("getUpdates")[polls].params.get("offset") == 730000009


async def test_a_document_over_20_mb_is_answered_plainly(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    body = copy.deepcopy(vector("document"))
    body["update_id"] = 730000600
    body["message"]["document"]["file_size"] = 21 * 1024 * 1024
    env["JAZZ_BRIDGE_LIMITS__MAX_ATTACHMENT_BYTES"] = str(64 * 1024 * 1024)
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, body) == 200
        (answer,) = await wait_sent(fake, ADA, "report.pdf")
        assert "limit" in answer.params["text"]
        assert not fake.called("getFile")


async def test_photo_voice_and_audio_are_downloaded_into_the_home(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    chat = vector("private_message")["message"]["chat"]
    sizes = [(90, 67, "ph-small"), (1280, 960, "ph-large"), (320, 240, "ph-medium")]
    photo = [
        {"file_id": fid, "file_unique_id": f"u-{fid}", "width": w, "height": h, "file_size": w}
        for w, h, fid in sizes
    ]
    voice = {"file_id": "vo-1", "file_unique_id": "u-vo-1", "duration": 2, "mime_type": "audio/ogg"}
    audio = {
        "file_id": "au-1",
        "file_unique_id": "u-au-1",
        "duration": 3,
        "file_name": "song.mp3",
        "mime_type": "audio/mpeg",
    }
    fake.add_file("ph-large", "photos/file_9.jpg", b"\xff\xd8large")
    fake.add_file("ph-small", "photos/file_7.jpg", b"\xff\xd8s")
    fake.add_file("ph-medium", "photos/file_8.jpg", b"\xff\xd8medium")
    fake.add_file("vo-1", "voice/file_10.oga", b"OggSvoice")
    fake.add_file("au-1", "music/file_11.mp3", b"ID3audio!")
    async with running_gateway(env) as (app, _client):
        home = await asyncio.to_thread(app.provisioned.homes.ensure, f"telegram:{ADA}")
        attachments = home.path / "workspace" / "attachments"
        for i, (key, media, data) in enumerate(
            [
                ("photo", photo, b"\xff\xd8large"),
                ("voice", voice, b"OggSvoice"),
                ("audio", audio, b"ID3audio!"),
            ]
        ):
            body = update(730000650 + i, chat, ADA, "", **{key: media, "caption": f"see {key}"})
            del body["message"]["text"]
            assert await post(app.port, body) == 200
            (answer,) = await wait_sent(fake, ADA, f"see {key}")
            (saved,) = [f for f in attachments.iterdir() if f.read_bytes() == data]
            st = saved.stat()
            assert (st.st_uid, st.st_gid) == (home.account.uid, home.operator_gid)
            assert f"attachments/{saved.name}: {len(data)} bytes" in answer.params["text"]
        # only the largest photo size was fetched
        fetched = [c.params["file_id"] for c in fake.called("getFile")]
        assert fetched == ["ph-large", "vo-1", "au-1"]
        assert fake.downloads == ["photos/file_9.jpg", "voice/file_10.oga", "music/file_11.mp3"]
        assert sorted(f.name for f in attachments.iterdir())[-1].endswith("song.mp3")


async def test_a_file_telegram_will_not_give_is_answered_plainly(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    chat = vector("private_message")["message"]["chat"]
    unknown = {"file_id": "gone", "file_unique_id": "u-gone", "file_name": "old.txt"}
    big = {"file_id": "big", "file_unique_id": "u-big", "file_name": "huge.bin"}  # no size
    fake.add_file("big", "documents/huge.bin", b"\0" * (20 * 1024 * 1024 + 1))
    env["JAZZ_BRIDGE_LIMITS__MAX_ATTACHMENT_BYTES"] = str(64 * 1024 * 1024)
    async with running_gateway(env) as (app, _client):
        body = update(730000680, chat, ADA, "", document=unknown, caption="read it")
        del body["message"]["text"]
        assert await post(app.port, body) == 200
        (refused,) = await wait_sent(fake, ADA, "old.txt")
        assert "invalid file_id" in refused.params["text"].lower()
        body = update(730000681, chat, ADA, "", document=big, caption="and this")
        del body["message"]["text"]
        assert await post(app.port, body) == 200
        (too_big,) = await wait_sent(fake, ADA, "huge.bin")
        assert "20,971,520-byte limit" in too_big.params["text"]
        assert not fake.downloads  # the size getFile reported was enough to refuse it
        assert not [c for c in sent_to(fake, ADA) if "reference runner" in c.params["text"]]


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


async def test_allowlist_and_configuration_errors(env: dict[str, str], fake: FakeBotApi) -> None:
    from bridge.errors import AdapterError

    no_list = dict(env, JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE="false")
    with pytest.raises(AdapterError, match="allowlist") as refused:
        async with running_gateway(no_list):
            pass
    for key in ("telegram.allowed_chats", "telegram.allowed_users", "telegram.allow_everyone"):
        assert key in str(refused.value)
    assert not fake.called("setWebhook")  # refused before it took any update
    no_secret = {k: v for k, v in env.items() if k != "JAZZ_BRIDGE_TELEGRAM__WEBHOOK_SECRET"}
    with pytest.raises(AdapterError, match=r"telegram\.webhook_secret"):
        async with running_gateway(no_secret):
            pass
    only_ada = dict(no_list, JAZZ_BRIDGE_TELEGRAM__ALLOWED_USERS=f"[{ADA}]")
    async with running_gateway(only_ada) as (app, _client):
        assert await post(app.port, vector("group_mention")) == 200  # Grace: not allowed
        assert sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="denied") == 1
        assert await stored(app) == 0
        # her button presses are answered (the button would spin) but do nothing
        assert await post(app.port, press(730000801, GRACE, GROUP_CHAT, "some-token.y")) == 200
        (toast,) = fake.called("answerCallbackQuery")
        assert toast.params["show_alert"] is True and "not allowed" in toast.params["text"]
        assert sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="denied") == 2
        assert await post(app.port, vector("private_message")) == 200
        await wait_sent(fake, ADA, "calendar")
        assert not sent_to(fake, GROUP)
    # a chat on the list lets in everyone in it
    ops_chat = dict(no_list, JAZZ_BRIDGE_TELEGRAM__ALLOWED_CHATS=f"[{GROUP}]")
    async with running_gateway(ops_chat) as (app, _client):
        assert await post(app.port, vector("group_mention")) == 200
        await wait_sent(fake, GROUP, "check the backup logs")
