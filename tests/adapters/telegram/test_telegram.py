"""The Telegram adapter: the real PTB client and the real gateway against a fake Bot API."""

from __future__ import annotations

import asyncio
import copy
import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_bot_api import Call, FakeBotApi
from gateway_harness import gateway_env, running_gateway, use_reference_runner, wait_until

from bridge.model import InboxState

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "telegram"
# PTB 22 itself warns when it builds a RetryAfter (its type becomes timedelta in v23)
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
TOKEN = "999999999:AAtest-token_for-the-fake"
SECRET = "s3cret-webhook_token"
BOT = 999999999
ADA, GRACE = 111111111, 222222222
GROUP = -1001234567890
FORUM = -1009876543210


def vector(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VECTORS / f"{name}.json").read_text())
    return data


@pytest.fixture
async def fake() -> AsyncIterator[FakeBotApi]:
    api = FakeBotApi(TOKEN)
    await api.start()
    yield api
    await api.stop()


@pytest.fixture
def env(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int], fake: FakeBotApi
) -> Iterator[dict[str, str]]:
    env = gateway_env(
        tmp_path / "root",
        fake_dir,
        uid_range,
        JAZZ_BRIDGE_TELEGRAM__TOKEN=TOKEN,
        JAZZ_BRIDGE_TELEGRAM__API_URL=fake.api_url,
        JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL="https://bridge.example/telegram/webhook",
        JAZZ_BRIDGE_TELEGRAM__WEBHOOK_SECRET=SECRET,
        JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE="true",
        JAZZ_BRIDGE_TELEGRAM__MIN_SEND_INTERVAL_S="0.05",
    )
    use_reference_runner(env, fake_dir)
    yield env
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def post(port: int, body: Any, secret: str | None = SECRET, raw: bytes | None = None) -> int:
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    data = raw if raw is not None else json.dumps(body).encode()
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"http://127.0.0.1:{port}/telegram/webhook", data=data, headers=headers) as r,
    ):
        return r.status


def sent_to(fake: FakeBotApi, chat: int, method: str = "sendMessage") -> list[Call]:
    return [c for c in fake.called(method) if int(c.params["chat_id"]) == chat]


async def wait_sent(
    fake: FakeBotApi, chat: int, contains: str, count: int = 1, timeout: float = 30
) -> list[Call]:
    found: list[Call] = []

    def check() -> bool:
        nonlocal found
        found = [c for c in sent_to(fake, chat) if contains in c.params.get("text", "")]
        return len(found) >= count

    try:
        await wait_until(check, timeout, f"{count} sendMessage to {chat} with {contains!r}")
    except AssertionError as exc:  # say what the fake saw
        seen = [(c.method, c.status, c.params.get("text", "")[:60]) for c in fake.calls]
        raise AssertionError(f"{exc}; the fake Bot API saw {seen}") from None
    return found


def sample(app: Any, name: str, **labels: str) -> float:
    value = app.metrics.registry.get_sample_value(name, labels)
    return float(value or 0.0)


async def stored(app: Any) -> int:
    total = 0
    for state in InboxState:
        total += len(await app.store.messages_in_state(state))
    return total


def update(update_id: int, chat: dict[str, Any], user: int, text: str, **extra: Any) -> dict:
    msg = {
        "message_id": update_id % 100000,
        "from": {"id": user, "is_bot": False, "first_name": "Grace" if user == GRACE else "Ada"},
        "chat": chat,
        "date": 1764669660,
        "text": text,
        **extra,
    }
    return {"update_id": update_id, "message": msg}


GROUP_CHAT = {"id": GROUP, "title": "Ops", "type": "supergroup"}


# -- intake ------------------------------------------------------------------------------------


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
        assert await stored(app) == 0
        assert not fake.called("sendMessage")
        # the webhook was set with the secret at start
        (hook,) = fake.called("setWebhook")
        assert hook.params["secret_token"] == SECRET


async def test_private_message_runs_once_even_when_redelivered(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        body = vector("private_message")
        assert await post(app.port, body) == 200
        assert await post(app.port, body) == 200  # Telegram redelivers the same update_id
        (answer,) = await wait_sent(fake, ADA, "calendar")
        assert "reference runner" in answer.params["text"].lower()
        assert answer.params.get("entities")  # Markdown went out as entities
        assert (
            sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="duplicate") == 1
        )
        await wait_until(
            lambda: sample(app, "jazz_bridge_runs_total", outcome="ok") == 1, 20, "one run"
        )
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
        assert not sent_to(fake, ADA)  # the edited private message never ran


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
        await wait_until(lambda: len(sent_to(fake, ADA)) >= 3, 30, "the answer in several messages")
        for call in sent_to(fake, ADA):
            assert len(call.params["text"].encode("utf-16-le")) // 2 <= 4096


async def test_set_my_commands_only_when_the_list_changed(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env):
        pass
    async with running_gateway(env):
        pass
    assert len(fake.called("setMyCommands")) == 1
    assert len(fake.called("setWebhook")) == 2


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
        assert saved.stat().st_uid == home.account.uid


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
    # a restart goes on from the stored offset
    async with running_gateway(env) as (app, _client):
        await wait_until(lambda: len(fake.called("getUpdates")) >= 4, 10, "polled after restart")
        offsets = [c.params.get("offset") for c in fake.called("getUpdates")]
        assert offsets[-1] == 730000002


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
        press = {
            "update_id": 730000701,
            "callback_query": {
                "id": "cq-stop",
                "from": {"id": ADA, "is_bot": False, "first_name": "Ada"},
                "message": {"message_id": 1, "chat": chat, "date": 1, "text": "working"},
                "chat_instance": "1",
                "data": stop["callback_data"],
            },
        }
        assert await post(app.port, press) == 200
        await wait_sent(fake, ADA, "Stopped by")
        assert fake.called("answerCallbackQuery")[-1].params.get("show_alert") in (False, None)


async def test_allowlist_and_configuration_errors(env: dict[str, str], fake: FakeBotApi) -> None:
    from bridge.errors import AdapterError

    no_list = dict(env, JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE="false")
    with pytest.raises(AdapterError, match="allowlist"):
        async with running_gateway(no_list):
            pass
    no_secret = {k: v for k, v in env.items() if k != "JAZZ_BRIDGE_TELEGRAM__WEBHOOK_SECRET"}
    with pytest.raises(AdapterError, match=r"telegram\.webhook_secret"):
        async with running_gateway(no_secret):
            pass
    only_ada = dict(no_list, JAZZ_BRIDGE_TELEGRAM__ALLOWED_USERS=f"[{ADA}]")
    async with running_gateway(only_ada) as (app, _client):
        assert await post(app.port, vector("group_mention")) == 200  # Grace: not allowed
        assert sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="denied") == 1
        assert await stored(app) == 0
        assert await post(app.port, vector("private_message")) == 200
        await wait_sent(fake, ADA, "calendar")
