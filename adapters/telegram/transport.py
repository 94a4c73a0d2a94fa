"""python-telegram-bot's HTTP transport on aiohttp instead of httpx.

Why: the Bot API calls are most of the gateway's own CPU per Telegram message (one
``getUpdates`` and one ``sendMessage`` each). Profiling ``bench/bench_telegram_load.py``
put httpx/httpcore at about two thirds of the event loop's busy time, a third of it in a
failing ``import sniffio`` that httpcore repeats on every request. aiohttp is already the
gateway's server and Slack client, so the bot uses the same client library and event loop
machinery. PTB documents ``BaseRequest`` as the place for a custom transport
(``ApplicationBuilder.request`` / ``.get_updates_request``): PTB keeps every Bot API
semantic (parameters, JSON parsing, ``RetryAfter``, ``BadRequest``...), this module only
moves bytes and maps transport failures onto PTB's own ``TimedOut`` and ``NetworkError``,
exactly as its httpx transport does.
"""

from __future__ import annotations

import io
import logging
import os
import re
import urllib.request
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp
from telegram._utils.defaultvalue import DefaultValue  # what PTB's own HTTPXRequest checks
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData

log = logging.getLogger(__name__)

DEFAULT_READ_S = 5.0  # the same defaults as PTB's HTTPXRequest
DEFAULT_WRITE_S = 5.0
DEFAULT_CONNECT_S = 5.0
DEFAULT_POOL_S = 1.0
MEDIA_WRITE_S = 20.0  # uploads get longer to send, as in HTTPXRequest
MIN_UPLOAD_BPS = 32 * 1024  # the slowest upload still allowed to finish (bytes a second)
FORM_HEADERS = {"Content-Type": "application/x-www-form-urlencoded"}
# the token in a Bot API URL (/bot<token>/method, /file/bot<token>/path): aiohttp's errors
# quote the URL they failed on, and their text reaches /healthz and the logs
TOKEN_IN_URL = re.compile(r"(?<=/bot)[^/\s'\"]+")
# a file name as httpx (PTB's own transport, HTML5 form encoding) sends it: UTF-8, with only
# the quote and the control characters but ESC percent-encoded. aiohttp's default quoting
# percent-encodes every other byte too, and Telegram shows the name as it arrives
# ("my%20report.pdf"); a raw line break is refused by aiohttp as a header injection.
FILENAME_ESCAPES = str.maketrans(
    {'"': "%22", **{chr(c): f"%{c:02X}" for c in range(0x20) if c != 0x1B}}
)


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (HTTPS_PROXY, ALL_PROXY, NO_PROXY...).

    Read once at start, as httpx honoured these: aiohttp's own ``trust_env`` reads them
    and ``~/.netrc`` again on every request, in a thread.
    """
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]  # not in the stubs
    if not parts.hostname or bypass(parts.hostname, proxies):
        return None
    return proxies.get(parts.scheme) or proxies.get("all")


def form_filename(name: str) -> str:
    """``name`` as a multipart ``filename`` Telegram shows as written (see FILENAME_ESCAPES).

    Half a surrogate pair (a runner's JSON can name a file with a byte that is not UTF-8)
    cannot be encoded at all: it becomes U+FFFD, not an error on every try.
    """
    text = name.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text.translate(FILENAME_ESCAPES)


def _content_size(content: Any) -> int:
    """Bytes in one upload part: bytes, or a file object (counted from where it stands)."""
    if isinstance(content, bytes | bytearray | memoryview):
        return len(content)
    try:
        if isinstance(content, io.BytesIO):
            end = content.getbuffer().nbytes
        else:
            end = os.fstat(content.fileno()).st_size
        return max(0, int(end) - int(content.tell()))
    except (AttributeError, OSError, ValueError):
        return 1  # unknown: an upload all the same (the four timeouts, no size allowance)


class AiohttpRequest(BaseRequest):
    """One aiohttp session (a pool of ``pool_size`` keep-alive connections) for the Bot API."""

    __slots__ = ("_pool_size", "_proxy", "_session", "_timeouts")

    def __init__(
        self,
        pool_size: int = 256,
        *,
        read_timeout: float | None = DEFAULT_READ_S,
        write_timeout: float | None = DEFAULT_WRITE_S,
        connect_timeout: float | None = DEFAULT_CONNECT_S,
        pool_timeout: float | None = DEFAULT_POOL_S,
        proxy: str | None = None,
    ) -> None:
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, not {pool_size}")
        self._pool_size = pool_size
        self._timeouts = (read_timeout, write_timeout, connect_timeout, pool_timeout)
        self._proxy = proxy
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float | None:
        return self._timeouts[0]

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._pool_size, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={"User-Agent": self.USER_AGENT},
                proxy=self._proxy,
                skip_auto_headers=("Accept-Encoding",),
            )

    async def shutdown(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    def _timeout(
        self, read: Any, write: Any, connect: Any, pool: Any, *, upload_bytes: int
    ) -> aiohttp.ClientTimeout:
        """PTB's four timeouts as aiohttp's: per read, per connect (pool wait included).

        aiohttp has no write timeout. A small body fits the socket's buffer, so only uploads
        need one: their whole request is bounded instead, by the four timeouts plus the time
        the body takes at :data:`MIN_UPLOAD_BPS`, so a peer that stops reading cannot hold
        the call forever while a slow link still gets through.
        """
        d_read, d_write, d_connect, d_pool = self._timeouts
        read = d_read if isinstance(read, DefaultValue) else read
        connect = d_connect if isinstance(connect, DefaultValue) else connect
        pool = d_pool if isinstance(pool, DefaultValue) else pool
        if isinstance(write, DefaultValue):
            write = MEDIA_WRITE_S if upload_bytes else d_write
        total = None
        parts = (read, write, connect, pool)
        if upload_bytes and all(p is not None for p in parts):
            total = float(sum(parts)) + upload_bytes / MIN_UPLOAD_BPS
        waiting = None if connect is None or pool is None else float(connect + pool)
        return aiohttp.ClientTimeout(
            total=total, connect=waiting, sock_connect=connect, sock_read=read
        )

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: Any = BaseRequest.DEFAULT_NONE,
        write_timeout: Any = BaseRequest.DEFAULT_NONE,
        connect_timeout: Any = BaseRequest.DEFAULT_NONE,
        pool_timeout: Any = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        session = self._session
        if session is None or session.closed:
            raise RuntimeError("AiohttpRequest is not initialized (call initialize() first)")
        files = request_data.multipart_data if request_data and request_data.contains_files else {}
        fields = request_data.json_parameters if request_data else None
        body: Any = None
        headers: dict[str, str] | None = None
        if files:
            # names escaped here as httpx does; aiohttp's own quoting would garble them
            form = aiohttp.FormData(quote_fields=False)
            for name, value in (fields or {}).items():
                form.add_field(name, value)
            for part, (filename, content, mimetype) in files.items():
                shown = form_filename(filename) if filename is not None else None
                form.add_field(part, content, filename=shown, content_type=mimetype)
            body = form
        elif fields:
            # application/x-www-form-urlencoded, as HTTPXRequest sends it; encoded here, as
            # aiohttp would (a dict became a FormData, built and walked for every call)
            body = urlencode(fields).encode("ascii")
            headers = FORM_HEADERS
        size = sum(_content_size(content) for _name, content, _type in files.values())
        timeout = self._timeout(
            read_timeout, write_timeout, connect_timeout, pool_timeout, upload_bytes=size
        )
        try:
            async with session.request(
                method, url, data=body, headers=headers, timeout=timeout
            ) as response:
                return response.status, await response.read()
        except TimeoutError as exc:  # aiohttp.ServerTimeoutError is one too
            why = without_token(repr(exc))
            raise TimedOut(f"the Bot API did not answer in time ({why})") from exc
        except aiohttp.ClientError as exc:
            # The class name is kept: many aiohttp errors have an empty message.
            why = without_token(str(exc))
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {why}") from exc


def without_token(text: str) -> str:
    """``text`` with the bot token of every Bot API URL in it masked (``/bot***/getMe``)."""
    return TOKEN_IN_URL.sub("***", text) if "/bot" in text else text
