"""A web chat message sent with files: ``multipart/form-data`` read as it streams in.

``POST /api/threads/{thread}/messages`` takes JSON, or this form: the fields ``user`` and
``text`` (which may be empty when files come) and up to :data:`MAX_FILES` parts named
``file``, each with its file name. The body is not buffered (a file may be larger than
``server.max_body_bytes``; see :func:`bridge.http.server.streamed`): aiohttp's multipart
reader gives it a chunk at a time, each chunk written to the upload's staged file off the
event loop (:mod:`.uploads`), each read given :data:`~bridge.http.server.STREAM_IDLE_S`.

A file over ``limits.max_attachment_bytes`` (the limit every platform's attachment has) is
refused with 413 saying the limit, as soon as it is seen to be over it; a file name with a
control character (a NUL, a newline) is refused, one with path separators or dots is cut
to its last part and cleaned as every platform's is (:func:`bridge.files.safe_filename`).
Whatever the refusal, the files already staged for the form are removed.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import mimetypes
import unicodedata
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import BadHttpMessage
from aiohttp.multipart import MultipartReader

from bridge.files import safe_filename
from bridge.http.server import STREAM_CHUNK_BYTES, STREAM_IDLE_S

from .uploads import StagedUploads

log = logging.getLogger(__name__)

MAX_FILES = 10  # files one message may carry (a Slack message or a Telegram album's 10)
MAX_FIELD_BYTES = 512 * 1024  # a text field's bytes (its 100,000 characters as UTF-8, and more)
WRITE_BATCH_BYTES = 1024 * 1024  # bytes gathered before one write off the loop
FIELDS = ("user", "text")
FILE_FIELD = "file"
UPLOAD_WALL_S = 3600.0  # a whole form, however steadily it trickles in
T = TypeVar("T")


class FormRefused(Exception):
    """A form the chat will not take: its HTTP status and a reason for the client."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class StagedFile:
    upload_id: str
    name: str  # cleaned: one plain entry (safe_filename)
    size: int
    media_type: str | None


@dataclass
class MessageForm:
    fields: dict[str, str] = field(default_factory=dict)
    files: list[StagedFile] = field(default_factory=list)


def upload_name(raw: str | None) -> str:
    """The name a file is kept under, from its part's file name; FormRefused when it names
    none or holds a control character."""
    if not raw:
        raise FormRefused(f"each '{FILE_FIELD}' part needs a file name (its filename)")
    bad = next((c for c in raw if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise FormRefused(
            f"the file name {raw!r} holds a control character (U+{ord(bad):04X}); "
            "rename the file and send it again"
        )
    last = raw.replace("\\", "/").rsplit("/", 1)[-1]
    if last.strip(". ") == "":
        raise FormRefused(f"the file name {raw!r} names no file; rename it and send it again")
    return safe_filename(last)


def too_big_text(name: str, limit: int) -> str:
    return (
        f"the file {name} is over the {limit:,}-byte limit for a file "
        "(limits.max_attachment_bytes); nothing was stored"
    )


class FormReader:
    """Reads one message form, staging its files in ``uploads``; ``limit``: a file's bytes."""

    def __init__(self, uploads: StagedUploads, limit: int) -> None:
        self.uploads = uploads
        self.limit = limit

    async def read(self, request: web.Request) -> MessageForm:
        """The form's fields and staged files; FormRefused (nothing left staged) otherwise."""
        form = MessageForm()
        try:
            async with asyncio.timeout(UPLOAD_WALL_S):
                await self._read(request, form)
        except FormRefused:
            await self.discard(form.files)
            raise
        except TimeoutError:
            await self.discard(form.files)
            raise FormRefused("the upload did not arrive in time; send it again", 408) from None
        except (
            ValueError,
            RuntimeError,
            AssertionError,
            BadHttpMessage,
            web.RequestPayloadError,
            web.HTTPException,
        ) as exc:
            await self.discard(form.files)  # the multipart reader's word for a broken body
            raise FormRefused(f"the form could not be read: {exc}") from None
        except OSError as exc:  # writing it (after TimeoutError, one of them): nothing kept
            log.error("web: a file sent with a message could not be kept: %s", exc)
            await self.discard(form.files)
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
            why = (
                "the gateway's disk is full"
                if full
                else f"the gateway cannot keep it ({exc.strerror})"
            )
            raise FormRefused(
                f"{why}: this was NOT stored; send it again later", 507 if full else 503
            ) from None
        except BaseException:
            await self.discard(form.files)  # the client went away (cancelled), a disk error
            raise
        return form

    async def discard(self, files: list[StagedFile]) -> None:
        """Remove staged files no message will take."""
        for staged in files:
            await asyncio.to_thread(self.uploads.discard, staged.upload_id)

    async def _read(self, request: web.Request, form: MessageForm) -> None:
        declared = request.content_length
        if declared is not None and declared > self._most():
            raise FormRefused(
                f"the form is {declared:,} bytes, more than {MAX_FILES} files of the "
                f"{self.limit:,}-byte limit for a file (limits.max_attachment_bytes) can be; "
                "nothing was stored",
                413,
            )
        reader = await request.multipart()
        while True:
            part = await _idle(reader.next())
            if part is None:
                return
            if isinstance(part, MultipartReader):
                raise FormRefused("a part of the form is itself multipart: send plain parts")
            if part.name in FIELDS:
                if part.name in form.fields:
                    raise FormRefused(f"the field '{part.name}' is given twice")
                form.fields[part.name] = await self._field(part)
            elif part.name == FILE_FIELD:
                if len(form.files) >= MAX_FILES:
                    raise FormRefused(f"a message takes at most {MAX_FILES} files")
                form.files.append(await self._file(part))
            else:
                raise FormRefused(
                    f"unknown field {part.name!r}: send 'user', 'text' and '{FILE_FIELD}' parts"
                )

    def _most(self) -> int:
        """The largest body a form may have: every file at the limit, and room for fields."""
        return MAX_FILES * (self.limit + 64 * 1024) + 2 * MAX_FIELD_BYTES

    async def _field(self, part: BodyPartReader) -> str:
        data = bytearray()
        while chunk := await _idle(part.read_chunk(STREAM_CHUNK_BYTES)):
            data += chunk
            if len(data) > MAX_FIELD_BYTES:
                raise FormRefused(f"the field '{part.name}' is over {MAX_FIELD_BYTES:,} bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise FormRefused(f"the field '{part.name}' is not UTF-8 text") from None

    async def _file(self, part: BodyPartReader) -> StagedFile:
        if part.headers.get("Content-Transfer-Encoding", "binary").lower() not in (
            "binary",
            "8bit",
            "7bit",
        ):
            raise FormRefused("send files as they are (no Content-Transfer-Encoding)")
        name = upload_name(part.filename)
        upload_id, fd = await asyncio.to_thread(self.uploads.open_partial)
        size = 0
        try:
            batch = bytearray()
            while chunk := await _idle(part.read_chunk(STREAM_CHUNK_BYTES)):
                size += len(chunk)
                if size > self.limit:
                    raise FormRefused(too_big_text(name, self.limit), 413)
                batch += chunk
                if len(batch) >= WRITE_BATCH_BYTES:
                    await asyncio.to_thread(self.uploads.write, fd, bytes(batch))
                    batch.clear()
            if batch:
                await asyncio.to_thread(self.uploads.write, fd, bytes(batch))
        except BaseException:
            await asyncio.shield(asyncio.to_thread(self.uploads.discard, upload_id, fd))
            raise
        try:
            await asyncio.to_thread(self.uploads.finish, upload_id, fd)  # closes fd
        except BaseException:
            await asyncio.shield(asyncio.to_thread(self.uploads.discard, upload_id))
            raise
        # the type is the name's, never the client's word (as the files route serves it)
        kind = mimetypes.guess_type(name, strict=False)[0]
        return StagedFile(upload_id=upload_id, name=name, size=size, media_type=kind)


async def _idle(read: Awaitable[T]) -> T:
    """One read of the body, given :data:`STREAM_IDLE_S` for its bytes to come."""
    try:
        async with asyncio.timeout(STREAM_IDLE_S):
            return await read
    except TimeoutError:
        raise FormRefused(
            f"the upload stalled: no bytes came for {STREAM_IDLE_S:.0f} s; send it again", 408
        ) from None
