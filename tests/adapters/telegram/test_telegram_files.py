"""What a person sends Telegram besides text, through the real gateway and PTB client against
a fake Bot API: a document, a photo (its largest size), a voice message or an audio file is
downloaded into the conversation's home, owned by its account, and its path given to the
agent; a file over the Bot API's 20 MB or the configured limit, or one Telegram will not
give, is answered plainly; a getFile refused for a while (429) is waited out; a file
captioned with a command is run or said not to be read; and a message of another kind (a
location, a contact, a poll...) reaches the agent as what it is."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from tg_support import (
    ADA,
    FakeBotApi,
    post,
    private_chat,
    running_gateway,
    sent_to,
    update,
    vector,
    wait_sent,
)

# PTB 22 itself warns when it builds a RetryAfter (its type becomes timedelta in v23)
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


ADA_USER = {"id": ADA, "is_bot": False, "first_name": "Ada"}


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


async def test_a_429_on_get_file_is_waited_out_not_answered_as_a_failure(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """getFile answered 429 (retry after 1 s): the download is tried again after it, and the
    message runs with its file (it was answered "could not fetch ... flood control" and
    never run; a single 5xx or a reset connection did the same)."""
    fake.add_file("doc-1", "documents/file_1.txt", b"the quarterly numbers")
    fake.fail("getFile", "429", retry_after=1)
    document = {"file_id": "doc-1", "file_unique_id": "u-doc-1", "file_name": "numbers.txt"}
    async with running_gateway(env) as (app, _client):
        body = update(730400001, private_chat(ADA), ADA, "", document=document)
        body["message"]["caption"] = "summarize these"
        del body["message"]["text"]
        assert await post(app.port, body) == 200
        (answer,) = await wait_sent(fake, ADA, "numbers.txt", timeout=20)
        assert "flood control" not in answer.params["text"], answer.params["text"]
        assert "Attachments: 1" in answer.params["text"], answer.params["text"]


def document_with(update_id: int, caption: str, file_id: str, name: str) -> dict:
    body = update(update_id, private_chat(ADA), ADA, "")
    del body["message"]["text"]
    body["message"]["caption"] = caption
    body["message"]["document"] = {
        "file_id": file_id,
        "file_unique_id": f"u-{file_id}",
        "file_name": name,
    }
    return body


async def test_a_file_captioned_with_a_command_is_run_or_said_not_read(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    fake.add_file("doc-new", "documents/new.txt", b"the fresh numbers")
    fake.add_file("doc-status", "documents/status.txt", b"unread")
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, document_with(730600001, "/new", "doc-new", "fresh.txt")) == 200
        await wait_sent(fake, ADA, "Started a fresh conversation")
        (answer,) = await wait_sent(fake, ADA, "Attachments: 1", timeout=20)
        assert "fresh.txt" in answer.params["text"]

        status = document_with(730600002, "/status", "doc-status", "status.txt")
        assert await post(app.port, status) == 200
        (said,) = await wait_sent(fake, ADA, "was not read")
        assert said.params["text"].startswith("Idle: nothing is running")  # /status answered


def sent(update_id: int, **content: Any) -> dict[str, Any]:
    """A private message from Ada holding only ``content`` (no text, no caption)."""
    message = {
        "message_id": update_id % 100000,
        "from": ADA_USER,
        "chat": private_chat(ADA),
        "date": 1764669660,
        **content,
    }
    return {"update_id": update_id, "message": message}


KINDS: dict[str, tuple[dict[str, Any], str]] = {
    "location": ({"location": {"latitude": 52.520008, "longitude": 13.404954}}, "52.520008"),
    "venue": (
        {
            "venue": {
                "location": {"latitude": 48.8584, "longitude": 2.2945},
                "title": "Eiffel Tower",
                "address": "Champ de Mars, Paris",
            },
            "location": {"latitude": 48.8584, "longitude": 2.2945},
        },
        "Eiffel Tower",
    ),
    "contact": (
        {"contact": {"phone_number": "+15550100", "first_name": "Linus", "user_id": 42}},
        "+15550100",
    ),
    "poll": (
        {
            "poll": {
                "id": "p1",
                "question": "Lunch where?",
                "options": [
                    {"persistent_id": "o1", "text": "Thai place", "voter_count": 0},
                    {"persistent_id": "o2", "text": "Pizza", "voter_count": 0},
                ],
                "total_voter_count": 0,
                "is_closed": False,
                "is_anonymous": True,
                "type": "regular",
                "allows_multiple_answers": False,
                "allows_revoting": False,
                "members_only": False,
            }
        },
        "Thai place",
    ),
    "sticker": (
        {
            "sticker": {
                "file_id": "STK",
                "file_unique_id": "stk1",
                "type": "regular",
                "width": 512,
                "height": 512,
                "is_animated": False,
                "is_video": False,
                "emoji": "👍",
            }
        },
        "👍",
    ),
    "video_note": (
        {
            "video_note": {
                "file_id": "ROUND",
                "file_unique_id": "rnd1",
                "length": 240,
                "duration": 3,
            }
        },
        "video-note-rnd1.mp4",
    ),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_a_message_of_another_kind_reaches_the_agent(
    kind: str, env: dict[str, str], fake: FakeBotApi
) -> None:
    content, expected = KINDS[kind]
    fake.add_file("ROUND", "video_notes/file_1.mp4", b"\x00\x00\x00\x18ftypmp42")
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, sent(730009601, **content)) == 200
        # the reference runner echoes its prompt: the agent was told what was sent
        await wait_sent(fake, ADA, expected, timeout=15)
