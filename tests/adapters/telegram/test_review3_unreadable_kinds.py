"""Review: what a person hears after sending something that is not text, a photo or a file.

A shared location ("what is near me?"), a contact, a poll, a round video message, a
sticker or a dice roll in a private chat were all dropped as "no text and no file (a
service message)": the person heard nothing at all, with no hint that the bot cannot read
it. Each is now handed to the agent as what it is (a location's coordinates, a contact's
name and number, a poll's question and options, a round video as a file, a sticker's
emoji).
"""

from __future__ import annotations

from typing import Any

import pytest
from tg_support import (
    ADA,
    FakeBotApi,
    post,
    private_chat,
    running_gateway,
    wait_sent,
)

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")

ADA_USER = {"id": ADA, "is_bot": False, "first_name": "Ada"}


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
