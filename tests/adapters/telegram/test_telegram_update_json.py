"""Updates read as JSON (adapters/telegram/update_json.py) read as python-telegram-bot read
them, and the updates PTB would refuse are still refused (adapters/telegram/buildable.py).

The intake's functions read the update's dict where they read PTB's objects: what they make
of a message must not depend on which they were given. ``buildable.read`` vouches, without
PTB, for the updates PTB builds; one it vouches for that PTB refuses would reach the intake
as it is (a poll PTB cannot build, once answered as malformed, now run). Both are checked
against PTB itself, on the real vectors and on shapes hypothesis draws from the vouched-for
fields.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from telegram import Message as PtbMessage
from telegram import Update as PtbUpdate
from tg_support import OLD_SERVER_POLL

from adapters.telegram import buildable, guard
from adapters.telegram.buildable import Kind, Leaf, Many, Spec, Unreadable, read, vouched
from adapters.telegram.inbound import Ignored, Rules, normalize_ids, to_inbound
from adapters.telegram.update_json import chat_name, entity_texts, full_name, message_json
from bridge.model import Inbound

HERE = Path(__file__).resolve().parent
VECTORS = sorted((HERE.parents[1] / "vectors" / "telegram").glob("*.json"))
BOT_ID = 999999999
BOT_NAME = "jazz_example_bot"
RULES = Rules(
    bot_id=BOT_ID,
    bot_username=BOT_NAME,
    allowed_chats=normalize_ids([-100555]),
    allowed_users=normalize_ids([111, "@grace"]),
    allow_everyone=False,
    operators=normalize_ids([111]),
    group_trigger="mention",
)
ADA = {"id": 111, "is_bot": False, "first_name": "Ada"}
PRIVATE = {"id": 111, "type": "private"}


def text_message() -> dict[str, Any]:
    return {"message_id": 5, "date": 1764669600, "chat": PRIVATE, "from": ADA, "text": "hi"}


def outcome(read_it: Callable[[], Inbound | Ignored]) -> object:
    """What a reading gives, comparable: the result (its receipt time aside) or the error."""
    try:
        result = read_it()
    except Exception as exc:
        return type(exc).__name__
    if isinstance(result, Inbound):
        return dataclasses.replace(result, received_at=0.0)
    return result


def read_alike(message: dict[str, Any], rules: Rules = RULES) -> None:
    """The message's JSON and the Message PTB builds of it make the same Inbound (or the
    same reason to ignore it, or the same error)."""
    built = PtbMessage.de_json(copy.deepcopy(message), None)
    albums = {f"{message['chat']['id']}:{message.get('media_group_id')}"}
    for keyed in (None, -100555):
        as_json = outcome(functools.partial(to_inbound, 7, message, rules, albums, keyed))
        as_ptb = outcome(functools.partial(to_inbound, 7, built, rules, albums, keyed))
        assert as_json == as_ptb, (message, as_json, as_ptb)


# -- the real vectors ------------------------------------------------------------------------


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_every_vector_is_vouched_for_and_read_as_ptb_reads_it(path: Path) -> None:
    data = json.loads(path.read_text())
    assert guard.problem(data) is None
    assert vouched(data), "a real update went the slow way (PTB built it)"
    assert read(data, None) is data  # the JSON itself: nothing built
    for kind in ("message", "edited_message"):
        if kind in data:
            read_alike(data[kind])


def test_a_vouched_update_is_read_as_it_came_and_left_untouched() -> None:
    data = {"update_id": 1, "message": text_message()}
    before = copy.deepcopy(data)
    assert read(data, None) is data
    assert data == before


# -- what PTB refuses is still refused --------------------------------------------------------


def old_server_poll() -> dict[str, Any]:
    poll = copy.deepcopy(OLD_SERVER_POLL)
    return {"update_id": 3, "message": {**text_message(), "poll": poll}}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda m: m.update(old_server_poll()["message"]), "persistent_id"),
        (lambda m: m.update(photo=[{"file_id": "f", "file_unique_id": "u"}]), "width"),
        (lambda m: m.update(voice={"file_id": "f", "file_unique_id": "u"}), "duration"),
        (lambda m: m.update(document={"file_id": "f"}), "file_unique_id"),
        (lambda m: m.pop("date"), "date"),
        (lambda m: m["from"].pop("first_name"), "first_name"),
        (lambda m: m.update(date=10**15), "year"),
        (lambda m: m.update(forum_topic_created={"name": "t"}), "icon_color"),
    ],
    ids=["poll", "photo", "voice", "document", "date", "first_name", "far_date", "topic"],
)
def test_an_update_ptb_cannot_build_is_unreadable_with_ptbs_own_words(
    change: Callable[[dict[str, Any]], object], said: str
) -> None:
    message = text_message()
    message["from"] = dict(ADA)
    change(message)
    data = {"update_id": 3, "message": message}
    assert guard.problem(data) is None  # the guard lets it by: only PTB refuses it
    assert not vouched(data)
    with pytest.raises(Unreadable) as refused:
        read(data, None)
    with pytest.raises(Exception) as ptb:
        PtbUpdate.de_json(copy.deepcopy(data), None)
    assert str(refused.value) == str(ptb.value) and said in str(refused.value)


@pytest.mark.parametrize(
    "extra",
    [
        {"new_chat_members": [ADA]},  # a field not vouched for
        {"link_preview_options": {"is_disabled": True}},
        {"caption": None},  # a null
        {"date": -5},  # a date the bounds do not vouch for, that PTB takes
    ],
    ids=["unlisted", "unlisted_object", "null", "negative_date"],
)
def test_an_update_not_vouched_for_is_read_as_ptb_writes_it_back(extra: dict[str, Any]) -> None:
    data = {"update_id": 4, "message": {**text_message(), **extra}}
    assert not vouched(data)
    got = read(data, None)
    assert got == PtbUpdate.de_json(copy.deepcopy(data), None).to_dict()
    assert got["message"]["text"] == "hi"


@pytest.mark.parametrize(
    "broken",
    [
        {"update_id": True},  # a bool is no number
        {"update_id": 1, "message": "hello"},
        {"update_id": 1, "message": {**text_message(), "entities": {"type": "mention"}}},
        {"update_id": 1, "message": {**text_message(), "chat": {"id": "7", "type": "private"}}},
        {"update_id": 1, "message": {**text_message(), "photo": [{"width": 1}] * 2 + [7]}},
        {"update_id": 1, "callback_query": {"id": "q", "from": ADA}},  # no chat_instance
        {"update_id": 1, "message": {**text_message(), "reply_markup": {"inline_keyboard": [1]}}},
    ],
)
def test_wrong_types_and_missing_fields_are_never_vouched_for(broken: dict[str, Any]) -> None:
    assert not vouched(broken)


# -- the view's own readings ------------------------------------------------------------------


def test_names_are_read_as_ptb_writes_them() -> None:
    assert full_name({"id": 1, "first_name": "Ada", "last_name": "Lovelace"}) == "Ada Lovelace"
    assert full_name({"id": 1, "first_name": "Ada"}) == "Ada"
    assert full_name({"id": 1, "first_name": "", "last_name": "L"}) is None
    assert chat_name({"id": 1, "type": "group", "title": ""}) == ""  # a title, even empty
    assert chat_name({"id": 1, "type": "private", "first_name": "Ada"}) == "Ada"
    assert chat_name({"id": 1, "type": "private"}) is None


def test_entities_are_cut_in_utf16_units_and_raise_where_ptb_raises() -> None:
    mention = {"type": "mention", "offset": 3, "length": 17}
    message: Any = {**text_message(), "text": f"😀 @{BOT_NAME}!", "entities": [mention]}
    assert entity_texts(message, "text", ["mention"]) == [(mention, f"@{BOT_NAME}")]
    assert entity_texts(message, "text", ["bold"]) == []
    assert entity_texts(message, "caption", ["mention"]) == []  # no caption entities
    without_text: Any = {**message, "text": None, "caption_entities": [mention]}
    with pytest.raises(AttributeError):
        entity_texts(without_text, "caption", ["mention"])
    halved: Any = {**message, "entities": [{"type": "mention", "offset": 1, "length": 2}]}
    with pytest.raises(UnicodeDecodeError):  # the emoji's second half
        entity_texts(halved, "text", ["mention"])


def test_a_message_ptb_built_is_read_as_its_json() -> None:
    raw = {**text_message(), "quote": {"text": "q", "position": 0}}
    built = PtbMessage.de_json(copy.deepcopy(raw), None)
    assert message_json(built)["quote"] == {"text": "q", "position": 0}
    assert message_json(raw) is raw


def test_a_mention_in_a_caption_or_as_a_text_mention_addresses_the_bot_in_a_group() -> None:
    group = {"id": -100555, "type": "supergroup", "title": "G"}
    caption = {
        **text_message(),
        "chat": group,
        "text": None,
        "caption": f"look @{BOT_NAME}",
        "caption_entities": [{"type": "mention", "offset": 5, "length": 17}],
        "photo": [{"file_id": "p", "file_unique_id": "u", "width": 2, "height": 2}],
    }
    result = to_inbound(1, caption, RULES)
    assert isinstance(result, Inbound) and result.text == "look"
    assert [a.name for a in result.attachments] == ["photo-u.jpg"]
    bot = {"id": BOT_ID, "is_bot": True, "first_name": "Jazz"}
    text_mention = {
        **text_message(),
        "chat": group,
        "text": "Jazz, go",
        "entities": [{"type": "text_mention", "offset": 0, "length": 4, "user": bot}],
    }
    assert isinstance(to_inbound(2, text_mention, RULES), Inbound)
    read_alike(caption)
    read_alike(text_mention)


# -- vouched-for shapes, drawn: PTB builds each, and reads it as the JSON reads -------------

WORDS = ["hi", " ", "\n", "😀", "/status", f"@{BOT_NAME}", f"/new@{BOT_NAME}", "/weather", "@x"]
TEXT = st.lists(st.sampled_from(WORDS), max_size=4).map("".join)
LEAVES: dict[str, st.SearchStrategy[Any]] = {
    "str": st.one_of(TEXT, st.text(max_size=3)),
    "int": st.integers(-3, 40),
    "bool": st.booleans(),
    "number": st.one_of(st.integers(-90, 90), st.floats(-90, 90)),
    "timestamp": st.integers(0, 2**33 - 1),
    "seconds": st.integers(0, 2**31 - 1),
}
FIELDS: dict[tuple[int, str], st.SearchStrategy[Any]] = {
    (id(buildable.CHAT), "type"): st.sampled_from(["private", "group", "supergroup", "channel"]),
    (id(buildable.CHAT), "id"): st.sampled_from([111, 222, -100555, -100777]),
    (id(buildable.CHAT), "username"): st.sampled_from(["Fans", "grace"]),
    (id(buildable.USER), "id"): st.sampled_from([111, 222, 333, BOT_ID]),
    (id(buildable.USER), "username"): st.sampled_from(["grace", "Grace", BOT_NAME, ""]),
    (id(buildable.USER), "is_bot"): st.sampled_from([False, False, False, True]),
    (id(buildable.ENTITY), "type"): st.sampled_from(["mention", "text_mention", "bold"]),
    (id(buildable.MESSAGE), "text"): TEXT,
    (id(buildable.MESSAGE), "caption"): TEXT,
    (id(buildable.MESSAGE), "media_group_id"): st.sampled_from(["a1", ""]),
}
DEEPEST = 2  # replies to replies drawn


def shape(spec: Spec, depth: int = 0) -> st.SearchStrategy[Any]:
    """JSON that ``spec`` vouches for."""
    if isinstance(spec, Leaf):
        return LEAVES[spec.name]
    if isinstance(spec, Many):
        return st.lists(shape(spec.item, depth), max_size=2)
    assert isinstance(spec, Kind)

    def field(key: str) -> st.SearchStrategy[Any]:
        if (id(spec), key) in FIELDS:
            return FIELDS[id(spec), key]
        sub = spec.fields[key]
        return shape(sub, depth + 1 if sub is buildable.MESSAGE else depth)

    fields = [k for k in spec.fields if not (k == "reply_to_message" and depth >= DEEPEST)]
    return st.fixed_dictionaries(
        {k: field(k) for k in fields if k in spec.required},
        optional={k: field(k) for k in fields if k not in spec.required},
    )


def mostly_from_a_person(drawn: tuple[dict[str, Any], int]) -> dict[str, Any]:
    """Most messages drawn come from a person, not a chat (or nothing reaches the agent)."""
    message, dice = drawn
    if dice < 8:
        message.pop("sender_chat", None)
        message.pop("is_automatic_forward", None)
        message.setdefault("from", {"id": 222, "is_bot": False, "first_name": "Grace"})
    return message


MESSAGES = st.tuples(shape(buildable.MESSAGE), st.integers(0, 9)).map(mostly_from_a_person)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=MESSAGES, everyone=st.booleans(), trigger=st.sampled_from(["mention", "all"]))
def test_ptb_builds_every_message_vouched_for_and_reads_it_as_its_json(
    message: dict[str, Any], everyone: bool, trigger: str
) -> None:
    data = {"update_id": 1, "message": message}
    assert vouched(data)
    if guard.problem(data) is not None:
        return  # the webhook refuses it before anything reads it
    PtbUpdate.de_json(copy.deepcopy(data), None)  # raises if the vouching is wrong
    read_alike(message, dataclasses.replace(RULES, allow_everyone=everyone, group_trigger=trigger))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(query=shape(buildable.CALLBACK))
def test_ptb_builds_every_button_press_vouched_for(query: dict[str, Any]) -> None:
    data = {"update_id": 1, "callback_query": query}
    assert vouched(data)
    built = PtbUpdate.de_json(copy.deepcopy(data), None)
    assert built.callback_query is not None and built.callback_query.id == query["id"]
