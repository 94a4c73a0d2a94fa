"""Files through the Bot API: an agent's file sent as a photo or a document, a person's
file fetched by ``getFile`` (within its 20 MB limit, and only from the Bot API's file
server), and why Telegram refused one (for the note sent in its place).

Its own module so :class:`~.surface.TelegramSurface` stays one readable class: the
surface paces an upload and sends the note; this is the calls and their checks.
"""

from __future__ import annotations

import logging
import re

from telegram import Bot, InputFile
from telegram.error import BadRequest, NetworkError, TelegramError, TimedOut

from bridge.model import Attachment
from bridge.ports import DeliveryError, FileTooLarge

from .calls import BotCalls
from .transport import without_token

log = logging.getLogger(__name__)

MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024  # the Bot API's getFile limit
MAX_PHOTO_BYTES = 10 * 1024 * 1024  # larger images go as documents
MAX_UPLOAD_MB = 50  # what a bot may send (a self-hosted Bot API server takes more)
TOO_LARGE = "entity too large"  # HTTP 413's phrase, or Telegram's own description of it
PHOTO_TYPES = frozenset({"image/jpeg", "image/png", "image/webp", "image/gif"})


def file_refused(exc: TelegramError) -> str | None:
    """Why Telegram will never take this file (for a note in the chat), or None when the
    failure is not the file's (flood control, the network, a chat that blocked the bot).

    A file over the upload limit is answered with HTTP 413 (JSON, or the page of the proxy
    in front), which PTB raises as a NetworkError, as if it would pass."""
    if isinstance(exc, TimedOut):
        return None
    if isinstance(exc, NetworkError) and TOO_LARGE in str(exc).lower():
        return f"Telegram takes files of up to {MAX_UPLOAD_MB} MB from a bot"
    if isinstance(exc, BadRequest):
        return f"Telegram refused it ({exc})"
    return None


def refused_note(name: str, size: int, why: str) -> str:
    """What is said in the chat in place of a file Telegram would not take."""
    return f"The agent made {_code(name)} ({size:,} bytes); it was not sent: {why}."


def _code(text: str) -> str:
    """``text`` as a Markdown code span, whatever backticks it holds."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


class TelegramFiles:
    def __init__(self, bot: Bot, calls: BotCalls) -> None:
        self.bot = bot
        self.calls = calls

    async def send(
        self, chat: int, thread: int | None, name: str, data: bytes, media_type: str | None
    ) -> int:
        """An image as a photo (a document if Telegram won't show it as one), else a document."""
        if media_type in PHOTO_TYPES and len(data) <= MAX_PHOTO_BYTES:
            try:
                sent = await self.calls.in_chat(
                    chat,
                    lambda c: self.bot.send_photo(
                        chat_id=c, photo=InputFile(data, filename=name), message_thread_id=thread
                    ),
                )
                return sent.message_id
            except BadRequest as exc:  # e.g. dimensions Telegram won't show
                log.info("%s not accepted as a photo (%s); sending a document", name, exc)
        sent = await self.calls.in_chat(
            chat,
            lambda c: self.bot.send_document(
                chat_id=c, document=InputFile(data, filename=name), message_thread_id=thread
            ),
        )
        return sent.message_id

    def _check_file_path(self, attachment: Attachment, file_path: str | None) -> None:
        """Refuse a ``getFile`` path that is not a file of the Bot API's file server.

        python-telegram-bot reads a ``file_path`` naming a file that exists on this machine
        (``/etc/shadow``, ``../state/bridge.db``) from the disk instead of downloading it: a
        Bot API server that is hostile, or a self-hosted one in ``--local`` mode, would have
        the gateway (root) copy its own files into a conversation's home.
        """
        base = self.bot.base_file_url.rstrip("/") + "/"
        path = file_path or ""
        if not path.startswith(base) or ".." in path[len(base) :].split("/"):
            raise DeliveryError(
                f"could not fetch {attachment.name}: Telegram named it {path[:80]!r}, which is "
                f"not a file of {without_token(base)} (a self-hosted Bot API server in --local "
                "mode is not supported)",
                permanent=True,
            )

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        limit = min(max_bytes, MAX_DOWNLOAD_BYTES)
        if attachment.size is not None and attachment.size > limit:
            raise FileTooLarge(attachment.name, limit, attachment.size)
        if not attachment.platform_id:
            raise DeliveryError(f"the file {attachment.name} has no Telegram id", permanent=True)
        try:
            file = await self.bot.get_file(attachment.platform_id)
            if file.file_size is not None and file.file_size > limit:
                raise FileTooLarge(attachment.name, limit, file.file_size)
            self._check_file_path(attachment, file.file_path)
            data = await file.download_as_bytearray()
        except TelegramError as exc:
            mapped = self.calls.map(exc)  # say which file: the person sees this
            raise DeliveryError(
                f"could not fetch {attachment.name} from Telegram: {mapped}",
                permanent=mapped.permanent,
                retry_after=mapped.retry_after,
            ) from exc
        if len(data) > limit:
            raise FileTooLarge(attachment.name, limit)
        return bytes(data)
