"""The Telegram surface's files (adapters/telegram/surface.py), on PTB's ``Bot`` over the
gateway's aiohttp transport against the fake Bot API.

A ``getFile`` path naming a file on the gateway's own machine is refused, never read
(python-telegram-bot reads a ``file_path`` that exists locally instead of downloading it:
a Bot API server answering ``/etc/shadow`` had the gateway copy it into a home). An artifact
reaches Telegram under its own name (aiohttp percent-encodes a multipart file name by
default, aio-libs/aiohttp#3910). One Telegram will not take (over its 50 MB upload limit:
HTTP 413; an empty file: 400) is named in the chat at once, instead of retried for an hour
and then recorded failed without a word."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_bot_api import Failure
from tg_support import FakeBotApi

from adapters.telegram.surface import TelegramSurface
from bridge.model import Attachment, ReplyTarget
from bridge.ports import DeliveryError

# PTB 22 itself warns when it builds a RetryAfter (its type becomes timedelta in v23)
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


CHAT = 111
TARGET = ReplyTarget("telegram", f"telegram:{CHAT}", {"chat_id": CHAT})
TOO_LARGE = {"ok": False, "error_code": 413, "description": "Request Entity Too Large"}
EMPTY = {"ok": False, "error_code": 400, "description": "Bad Request: file must be non-empty"}


@pytest.mark.parametrize("where", ["absolute", "relative", "dot-dot"])
async def test_a_local_file_path_is_refused_not_read(
    surface: tuple[TelegramSurface, FakeBotApi],
    tmp_path: Path,
    where: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s, fake = surface
    secret = tmp_path / "gateway-secret.txt"
    secret.write_text("the gateway's own file")
    monkeypatch.chdir(tmp_path)
    path = {
        "absolute": str(secret),
        "relative": secret.name,
        "dot-dot": f"../{tmp_path.name}/{secret.name}",
    }[where]
    fake.add_file("f1", path, b"what Telegram holds")
    with pytest.raises(DeliveryError) as refused:
        data = await s.download(Attachment(name="report.pdf", platform_id="f1"), 10_000)
        pytest.fail(f"the download returned {data!r}")
    assert refused.value.permanent and "report.pdf" in str(refused.value)


async def test_a_file_of_the_file_server_still_downloads(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    s, fake = surface
    fake.add_file("f2", "documents/file_2.txt", b"hello")
    assert await s.download(Attachment(name="f2.txt", platform_id="f2"), 1000) == b"hello"


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("my report.pdf", "my report.pdf"),
        ("отчёт 2024.csv", "отчёт 2024.csv"),
        ("100% done.txt", "100% done.txt"),
        ('say "hi".txt', "say %22hi%22.txt"),  # as httpx (HTML5 form encoding) sends it
        ("line\nbreak.txt", "line%0Abreak.txt"),  # never a header of its own
    ],
)
async def test_a_file_keeps_its_name(
    surface: tuple[TelegramSurface, FakeBotApi], name: str, shown: str
) -> None:
    s, fake = surface
    await s.upload(TARGET, name, b"some data", "text/plain", reply_key=f"artifact:{name}")
    (call,) = fake.called("sendDocument")
    assert call.params["document"]["filename"] == shown


async def test_a_name_with_half_a_surrogate_pair_is_sent_not_retried_for_an_hour(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    """A runner's JSON may name a file with a lone surrogate (a byte that is not UTF-8)."""
    s, fake = surface
    await s.upload(TARGET, "data\udcff.txt", b"x", "text/plain", reply_key="artifact:s")
    (call,) = fake.called("sendDocument")
    assert call.params["document"]["filename"] == "data\ufffd.txt"


def refuse(fake: FakeBotApi, method: str, status: int, body: dict[str, object]) -> None:
    fake.failures.append(Failure(method, status, body, lambda _p: True))


async def test_a_file_over_telegrams_upload_limit_is_named_in_the_chat(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    s, fake = surface
    refuse(fake, "sendDocument", 413, TOO_LARGE)
    data = b"\0" * 300_000  # the fake's body limit; the size is what Telegram refuses
    ref = await s.upload(TARGET, "dump.bin", data, None, reply_key="artifact:1:0")
    (note,) = fake.called("sendMessage")
    assert ref == f"{CHAT}:{note.result['message_id']}"
    text = note.params["text"]
    assert "dump.bin" in text and "300,000 bytes" in text and "50 MB" in text, text
    assert not fake.called("sendDocument")  # the one call was refused; not tried again


async def test_a_file_telegram_refuses_is_named_with_telegrams_reason(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    s, fake = surface
    refuse(fake, "sendPhoto", 400, EMPTY)  # an empty .png: not a photo, then not a document
    refuse(fake, "sendDocument", 400, EMPTY)
    await s.upload(TARGET, "plot.png", b"", "image/png", reply_key="artifact:2:0")
    (note,) = fake.called("sendMessage")
    assert "plot.png" in note.params["text"] and "non-empty" in note.params["text"]


async def test_a_chat_that_blocked_the_bot_gets_no_note(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    """A refusal of the chat, not of the file, is the core's to record (no note can land)."""
    s, fake = surface
    fake.fail_next("sendDocument", "forbidden")
    with pytest.raises(Exception, match="blocked") as err:
        await s.upload(TARGET, "a.txt", b"x", "text/plain", reply_key="artifact:3:0")
    assert getattr(err.value, "permanent", False)
    assert not fake.called("sendMessage", ok=True) and not fake.called("sendMessage", ok=False)
