"""``GET /api/threads/{thread}/files?path=<name>``: a file the thread was sent, for the page.

The page showed an artifact by its path and nothing more: no way to open it. Its reply
names the file relative to the conversation's home (``workspace/plot.png``); the page now
links to it (and previews an image) through this route, behind the same token, cookie
and peer rules as the rest of the chat's API. The client gives that home-relative name,
never an absolute path and never ``..`` (both a 400 saying so); only a file the thread's
own transcript names is served: one the agent sent, or one a person sent with a message
(:mod:`.form`) once its turn saved it into the home (another thread's file, or any other
file of the home, is 404), read from the thread's own home with
:func:`bridge.files.read_in_home` (no link followed at any step, a regular file of the
home's account, at most its size limit).

A page or an SVG the agent wrote could run script on the chat's origin if shown there, so
only raster images (png, jpeg, gif, webp) are served inline; everything else is an
attachment, and every answer has ``nosniff``, a sandbox that runs nothing and a
``Cross-Origin-Resource-Policy`` that keeps it off other sites' pages.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import os
from pathlib import Path
from urllib.parse import quote

from aiohttp import web

from bridge.files import in_home, paths_for_people, read_in_home
from bridge.ports import AdapterContext
from bridge.store.records import TranscriptEntry
from provisioning.errors import LayoutError, UnsafePathError
from provisioning.layout import Layout

from .answers import bad
from .auth import WebAuth

log = logging.getLogger(__name__)

INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
UNKNOWN_TYPE = "application/octet-stream"
MAX_NAME = 4096  # characters of a name asked for (PATH_MAX)
NOT_FOUND = (
    "no such file in this thread (only the files the agent sent it, and those sent with its "
    "messages, are served)"
)
FILE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Cache-Control": "private, no-store",
    "Referrer-Policy": "no-referrer",
    # another site's page may not even embed it (an <img> of it there loads nothing): without
    # a token the chat trusts the browser on loopback, whichever page asks
    "Cross-Origin-Resource-Policy": "same-origin",
}


def media_type(name: str) -> str:
    """The type a file is served as, from its name (never from the runner's word)."""
    return mimetypes.guess_type(name, strict=False)[0] or UNKNOWN_TYPE


def file_url(thread: str, name: str) -> str:
    """The page's link to ``name`` (relative to the home) in ``thread``."""
    return f"/api/threads/{quote(thread, safe='')}/files?path={quote(name, safe='/')}"


def disposition(name: str, inline: bool) -> str:
    """``Content-Disposition`` naming the file's last part (RFC 6266, UTF-8 as ``filename*``)."""
    base = os.path.basename(name) or "file"
    plain = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in base)
    kind = "inline" if inline else "attachment"
    return f"{kind}; filename=\"{plain}\"; filename*=UTF-8''{quote(base, safe='')}"


def home_of(ctx: AdapterContext, home_name: str) -> Path | None:
    """The conversation's home directory, by its name under ``chats/``."""
    try:
        return Layout(Path(ctx.core.root)).home(home_name)
    except LayoutError:
        return None


def relative(home: Path, path: str) -> str | None:
    """``path`` (as the store has it) relative to ``home``, or None when it is not in it."""
    try:
        return in_home(home, path)
    except UnsafePathError:
        return None


def shown_files(home: Path, entries: list[TranscriptEntry]) -> set[str]:
    """The files the thread's transcript names, relative to ``home``: those the agent sent,
    and those people sent with their messages once saved into the home."""
    paths = [e.file_path for e in entries if e.file_path]
    paths += [str(a["local_path"]) for e in entries for a in e.attachments if a.get("local_path")]
    return {rel for rel in (relative(home, p) for p in paths) if rel is not None}


def asked_name(query: str) -> str:
    """The name a client asked for, normalised; ValueError saying what is wrong with it."""
    if not query or len(query) > MAX_NAME:
        raise ValueError(
            f"'path' must name a file of the thread, relative to its home "
            f"(workspace/plot.png), in at most {MAX_NAME} characters"
        )
    if "\0" in query or "\\" in query:
        raise ValueError("'path' holds a NUL or a backslash: no file of the thread is named so")
    if os.path.isabs(query):
        raise ValueError(
            "'path' must be relative to the conversation's home (workspace/plot.png, as the "
            "page's link gives it), not an absolute path"
        )
    if os.pardir in query.split("/"):
        raise ValueError("'path' may not climb with '..': name the file inside the home")
    return os.path.normpath(query)


class ThreadFiles:
    """The file route's handler."""

    def __init__(self, ctx: AdapterContext, auth: WebAuth) -> None:
        self.ctx = ctx
        self.auth = auth

    async def handle(self, request: web.Request) -> web.Response:
        thread = self.auth.admitted(request)
        if isinstance(thread, web.Response):
            return thread
        try:
            name = asked_name(request.query.get("path", ""))
        except ValueError as exc:
            return bad(str(exc))
        key = f"web:{thread}"
        conv = await self.ctx.store.conversation_by_key(key)
        home = home_of(self.ctx, conv.home) if conv is not None else None
        if home is None:
            return bad(NOT_FOUND, 404)
        entries = await self.ctx.store.transcript(key)
        if name not in shown_files(home, entries):
            return bad(NOT_FOUND, 404)
        try:
            data = await asyncio.to_thread(read_in_home, home, name)
        except (UnsafePathError, OSError) as exc:
            log.warning("web: file %s of %s not served: %s", name, key, exc)
            # the page never names the server's paths (the home archived meanwhile, a link)
            why = paths_for_people(str(exc), home, home.parents[1])  # <root>/chats/<home>
            return bad(f"this file cannot be served: {why}", 404)
        kind = media_type(name)
        inline = kind in INLINE_TYPES
        headers = {**FILE_HEADERS, "Content-Disposition": disposition(name, inline)}
        return web.Response(body=data, content_type=kind, headers=headers)
