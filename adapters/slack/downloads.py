"""Files people share with the bot, fetched from Slack: a file sent with only its id
completed from files.info, then downloaded with the bot token, within a size limit.

The token goes only to Slack's own hosts (https on 443, a slack.com host) or to the
configured API's origin (``slack.api_url``), never to a URL an event merely names. Apart
from the surface because inbound files are a job of their own (an HTTP session, the
token's rule), unrelated to replying.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from bridge.model import Attachment
from bridge.ports import DeliveryError, FileTooLarge

from .errors import CALL_ERRORS, slack_error

DOWNLOAD_CHUNK = 64 * 1024
DEFAULT_PORTS = {"https": 443, "http": 80}


def _origin(url: str) -> tuple[str, str, int] | None:
    """A URL's scheme, host and port (its scheme's default when it names none), or None
    when it has no host or an invalid port."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    try:
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:
        return None
    if not host or port is None:
        return None
    return scheme, host, port


class SlackDownloads:
    """The downloads of one surface: its bot token, the API's origin, and an HTTP session."""

    def __init__(
        self, client: AsyncWebClient, bot_token: str, *, api_url: str, max_file_bytes: int
    ) -> None:
        self.client = client
        self._token = bot_token
        self._api_origin = _origin(api_url)
        self.max_file_bytes = max_file_bytes
        self._session: aiohttp.ClientSession | None = None

    def may_send_token(self, url: str) -> bool:
        """Whether ``url`` is Slack's (https on 443, a slack.com host) or the configured API's
        (``slack.api_url``: the same scheme, host and port): the bot token goes nowhere else,
        not to another port or a plain-http URL on the same host."""
        origin = _origin(url)
        if origin is None:
            return False
        if origin == self._api_origin:
            return True
        scheme, host, port = origin
        return (scheme, port) == ("https", 443) and (
            host == "slack.com" or host.endswith(".slack.com")
        )

    async def resolve(self, attachment: Attachment) -> Attachment:
        """A file sent as ``check_file_info`` (its id only) completed from files.info."""
        if not attachment.url and attachment.platform_id:
            return await self._file_info(attachment)
        return attachment

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        limit = min(max_bytes, self.max_file_bytes)
        attachment = await self.resolve(attachment)
        if attachment.size is not None and attachment.size > limit:
            raise FileTooLarge(attachment.name, limit, attachment.size)
        url = attachment.url
        if not url:
            raise DeliveryError(f"the file {attachment.name} has no download URL", permanent=True)
        if not self.may_send_token(url):
            raise DeliveryError(
                f"refusing to send the bot token to {urlsplit(url).hostname!r} for "
                f"{attachment.name}: not a Slack host",
                permanent=True,
            )
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            async with self._session.get(url, headers=headers, allow_redirects=True) as resp:
                if resp.status != 200:
                    raise DeliveryError(
                        f"downloading {attachment.name}: HTTP {resp.status}",
                        permanent=400 <= resp.status < 500 and resp.status != 429,
                    )
                if resp.content_type == "text/html":
                    raise DeliveryError(
                        f"downloading {attachment.name}: Slack answered with a web page (a "
                        "login page), not the file: the bot token lacks files:read or the file "
                        "is not shared with the bot",
                        permanent=True,
                    )
                chunks: list[bytes] = []
                total = 0
                async for chunk in resp.content.iter_chunked(DOWNLOAD_CHUNK):
                    total += len(chunk)
                    if total > limit:
                        raise FileTooLarge(attachment.name, limit)
                    chunks.append(chunk)
                return b"".join(chunks)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DeliveryError(f"downloading {attachment.name}: {exc}") from exc

    async def _file_info(self, attachment: Attachment) -> Attachment:
        """``attachment`` (a file Slack sent with only its id) with its name, size, type and
        download URL from files.info. Its failure names the file, so the person is told
        which one did not reach the agent; one Slack will not serve is permanent."""
        file_id = str(attachment.platform_id)
        try:
            response = await self.client.files_info(file=file_id)
        except CALL_ERRORS as exc:
            error = slack_error(exc, "files.info")
            raise DeliveryError(
                f"the file {file_id} shared with the message could not be fetched ({error}); "
                "send it again, or check that the app has files:read",
                permanent=error.permanent,
                retry_after=error.retry_after,
            ) from exc
        info = response.get("file")
        info = info if isinstance(info, dict) else {}
        url = info.get("url_private_download") or info.get("url_private")
        name = str(info.get("name") or info.get("title") or file_id)
        if not url:  # deleted, hidden by the plan's limit, still processing, or external
            raise DeliveryError(
                f"the file {name} ({file_id}) shared with the message has no download link on "
                f"Slack (mode {info.get('mode') or 'unknown'}); send it again as an upload",
                permanent=True,
            )
        size = info.get("size")
        return Attachment(
            name=name,
            url=str(url),
            size=size if isinstance(size, int) else None,
            media_type=info.get("mimetype") or attachment.media_type,
            platform_id=file_id,
        )

    async def close(self) -> None:
        """Close the HTTP session downloads were made with (a new one opens if needed)."""
        if self._session is not None:
            await self._session.close()
            self._session = None
