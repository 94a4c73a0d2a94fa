"""Replies to Slack through the real ``AsyncWebClient``: messages, edits, buttons, files.

Answers go out as ``markdown_text`` (Slack renders standard Markdown there); prompts and the
progress bubble as Block Kit (a ``markdown`` block plus buttons whose ``value`` is the
core's opaque token). Every ``chat.postMessage`` carries its reply key in the message
metadata, so after an unclear failure (the connection dropped, Slack answered 5xx) the
thread is searched for it before the message is sent again: never a blind duplicate. The
same search is the core's :class:`~bridge.ports.ConfirmsDelivery` hook (``find_sent``), so
a reply found undelivered after a crash is looked up before it is sent again (files have
no metadata: an artifact upload is at least once).

A 429 closes that Web API method for its ``Retry-After``: calls meanwhile are not made
(a :class:`DeliveryError` carrying the time left, which the core's delivery waits out); a
progress edit refused that way is kept and sent once the method opens again, so the
bubble still ends on the run's summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.model import Attachment, Outgoing, ReplyKind, ReplyTarget
from bridge.ports import Capabilities, DeliveryError

log = logging.getLogger(__name__)

METADATA_EVENT = "jazz_bridge_reply"
MARKDOWN_BLOCK_MAX = 11_000  # Slack: 12,000 characters across a message's markdown blocks
BUTTON_LABEL_MAX = 75
BUTTONS_PER_ACTIONS = 25
DOWNLOAD_CHUNK = 64 * 1024
MAX_EDIT_STATE = 2000  # messages whose edit order is tracked; idle ones are forgotten past this
LOOKUP_PAGES = 10  # conversations.replies pages searched for a reply key
PERMANENT_ERRORS = frozenset(
    {
        "account_inactive",
        "cant_update_message",
        "channel_not_found",
        "edit_window_closed",
        "ekm_access_denied",
        "invalid_arguments",
        "invalid_auth",
        "invalid_blocks",
        "invalid_blocks_format",
        "is_archived",
        "message_not_found",
        "missing_scope",
        "msg_too_long",
        "no_permission",
        "no_text",
        "not_allowed_token_type",
        "not_authed",
        "not_in_channel",
        "restricted_action",
        "team_access_not_granted",
        "token_revoked",
        "user_not_in_channel",
    }
)


def retry_after_of(exc: Exception) -> float | None:
    """Seconds Slack asked to wait (a 429), else None."""
    if not isinstance(exc, SlackApiError) or exc.response is None:
        return None
    response = exc.response
    if getattr(response, "status_code", 0) != 429 and response.get("error") != "ratelimited":
        return None
    headers = getattr(response, "headers", {}) or {}
    raw = headers.get("Retry-After") or headers.get("retry-after") or "1"
    if isinstance(raw, list):  # slack_sdk keeps aiohttp's multi-valued headers as lists
        raw = raw[0] if raw else "1"
    try:
        return max(float(raw), 1.0)
    except ValueError:
        return 1.0


def slack_error(exc: Exception, what: str) -> DeliveryError:
    """Map a slack_sdk / transport error to the core's :class:`DeliveryError`."""
    if isinstance(exc, SlackApiError):
        response = exc.response
        code = str(response.get("error") or "") if response is not None else ""
        status = getattr(response, "status_code", 0)
        retry_after = retry_after_of(exc)
        if retry_after is not None:
            return DeliveryError(f"{what}: rate limited", retry_after=retry_after)
        return DeliveryError(
            f"{what}: {code or f'HTTP {status}'}",
            permanent=code in PERMANENT_ERRORS or (400 <= status < 500 and status != 429),
        )
    return DeliveryError(f"{what}: {type(exc).__name__}: {exc}")


def _unclear(exc: Exception) -> bool:
    """Did the request maybe reach Slack and post anyway (so a resend could duplicate)?"""
    if isinstance(exc, SlackApiError):
        return getattr(exc.response, "status_code", 0) >= 500
    return True


def _plain(text: str, limit: int = 3000) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def blocks_for(message: Outgoing) -> list[dict[str, Any]]:
    """A markdown block with the text, then the choices as buttons (if any)."""
    blocks: list[dict[str, Any]] = [
        {"type": "markdown", "text": _plain(message.text or " ", MARKDOWN_BLOCK_MAX)}
    ]
    buttons: list[dict[str, Any]] = []
    for i, choice in enumerate(message.choices):
        button: dict[str, Any] = {
            "type": "button",
            "action_id": f"jb_choice_{i}",
            "text": {"type": "plain_text", "text": _plain(choice.label, BUTTON_LABEL_MAX)},
            "value": choice.token,
        }
        if choice.style in ("primary", "danger"):
            button["style"] = choice.style
        buttons.append(button)
    for start in range(0, len(buttons), BUTTONS_PER_ACTIONS):
        blocks.append(
            {
                "type": "actions",
                "block_id": f"jb_choices_{start // BUTTONS_PER_ACTIONS}",
                "elements": buttons[start : start + BUTTONS_PER_ACTIONS],
            }
        )
    return blocks


def split_ref(ref: str) -> tuple[str, str]:
    channel, _, ts = ref.partition(":")
    if not channel or not ts:
        raise DeliveryError(f"not a Slack message reference: {ref!r}", permanent=True)
    return channel, ts


class SlackSurface:
    name = "slack"
    capabilities = Capabilities(
        edit=True,
        buttons=True,
        upload=True,
        typing=True,
        max_length=12_000,
        edit_interval_s=3.0,  # chat.update is ~50 a minute per workspace (Tier 3)
        confirm_delivery=True,
    )

    def __init__(
        self,
        client: AsyncWebClient,
        bot_token: str,
        *,
        api_url: str,
        max_file_bytes: int,
    ) -> None:
        self.client = client
        self._token = bot_token
        self._api_host = (urlsplit(api_url).hostname or "").lower()
        self.max_file_bytes = max_file_bytes
        self._unclear: dict[str, tuple[str, str | None]] = {}  # reply key -> channel, thread
        self._no_status: set[str] = set()  # channels where assistant status is unavailable
        self._session: aiohttp.ClientSession | None = None
        self._closed_until: dict[str, float] = {}  # Web API method -> monotonic reopen time
        self._held_edits: dict[str, tuple[Outgoing, int]] = {}  # ref -> newest refused edit
        self._flusher: asyncio.Task[None] | None = None
        # chat.update of one message, one at a time and newest last: a held progress edit
        # in flight must not land after the summary that replaced it
        self._edit_locks: dict[str, asyncio.Lock] = {}
        self._edit_seq: dict[str, int] = {}

    # -- rate limits --------------------------------------------------------------------------

    def _gate(self, method: str) -> None:
        """Refuse (without calling Slack) while a 429 on ``method`` has not run out."""
        left = self._closed_until.get(method, 0.0) - time.monotonic()
        if left > 0:
            raise DeliveryError(f"{method}: rate limited for {left:.1f}s more", retry_after=left)

    def _note(self, method: str, exc: Exception) -> None:
        retry_after = retry_after_of(exc)
        if retry_after is not None:
            self._closed_until[method] = time.monotonic() + retry_after
            log.info("slack: %s rate limited for %.1fs", method, retry_after)

    async def _flush_edits(self) -> None:
        """Send the newest held progress edit of each message once chat.update reopens."""
        while self._held_edits:
            wait = self._closed_until.get("chat.update", 0.0) - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # waiting out Retry-After, not synchronisation
                continue
            ref, (message, seq) = next(iter(self._held_edits.items()))
            del self._held_edits[ref]
            try:
                await self._update(ref, message, seq)
            except DeliveryError as exc:
                if exc.retry_after and ref not in self._held_edits:
                    self._held_edits[ref] = (message, seq)
                elif not exc.retry_after:
                    log.info("slack: held progress edit dropped: %s", exc)

    async def close(self) -> None:
        if self._flusher is not None:
            if not self._flusher.done():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self._flusher), timeout=5)
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._flusher
            self._flusher = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    @staticmethod
    def _where(target: ReplyTarget) -> tuple[str, str | None]:
        channel = target.context.get("channel")
        if not isinstance(channel, str) or not channel:
            raise DeliveryError(f"no Slack channel for {target.thread_key}", permanent=True)
        thread_ts = target.context.get("thread_ts")
        return channel, thread_ts if isinstance(thread_ts, str) and thread_ts else None

    # -- messages -----------------------------------------------------------------------------

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        channel, thread_ts = self._where(target)
        if reply_key in self._unclear:  # raises when it cannot tell: no blind resend
            found = await self._lookup(channel, thread_ts, reply_key)
            if found is not None:
                return found
        kwargs: dict[str, Any] = {
            "channel": channel,
            "metadata": {"event_type": METADATA_EVENT, "event_payload": {"reply_key": reply_key}},
        }
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        if message.choices or message.kind is ReplyKind.PROMPT:
            kwargs["blocks"] = blocks_for(message)
            kwargs["text"] = _plain(message.text or " ")
        else:
            kwargs["markdown_text"] = message.text or " "
        self._gate("chat.postMessage")
        try:
            response = await self.client.chat_postMessage(**kwargs)
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            self._note("chat.postMessage", exc)
            if _unclear(exc):
                self._unclear[reply_key] = (channel, thread_ts)
            raise slack_error(exc, "chat.postMessage") from exc
        self._unclear.pop(reply_key, None)
        return f"{channel}:{response['ts']}"

    async def find_sent(self, target: ReplyTarget, reply_key: str) -> str | None:
        """The core's question before a resend: did the message with ``reply_key`` land?"""
        channel, thread_ts = self._where(target)
        return await self._lookup(channel, thread_ts, reply_key)

    async def _lookup(self, channel: str, thread_ts: str | None, reply_key: str) -> str | None:
        """Search the thread (or the channel's newest messages) for the reply key in the
        messages' metadata. None only when Slack said it is not there; a failed search
        raises :class:`DeliveryError` (the caller asks again rather than post twice)."""
        method = "conversations.replies" if thread_ts else "conversations.history"
        cursor: str | None = None
        for _page in range(LOOKUP_PAGES):
            self._gate(method)
            try:
                if thread_ts:
                    response = await self.client.conversations_replies(
                        channel=channel,
                        ts=thread_ts,
                        include_all_metadata=True,
                        limit=200,
                        cursor=cursor,
                    )
                else:  # newest first: a reply in doubt is among the latest
                    response = await self.client.conversations_history(
                        channel=channel, include_all_metadata=True, limit=100
                    )
            except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                self._note(method, exc)
                log.info("could not check whether reply %s landed: %s", reply_key, exc)
                raise slack_error(exc, method) from exc
            for msg in response.get("messages") or []:
                meta = msg.get("metadata") or {}
                payload = meta.get("event_payload") or {}
                if (
                    meta.get("event_type") == METADATA_EVENT
                    and payload.get("reply_key") == reply_key
                ):
                    self._unclear.pop(reply_key, None)
                    return f"{channel}:{msg['ts']}"
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
            if not thread_ts or not response.get("has_more") or not cursor:
                self._unclear.pop(reply_key, None)  # Slack says it is not there
                return None
        raise DeliveryError(
            f"{method}: reply {reply_key} not found in the first {LOOKUP_PAGES * 200} replies "
            "of the thread; cannot tell whether it landed"
        )

    async def edit(self, target: ReplyTarget, ref: str, message: Outgoing) -> None:
        seq = self._edit_seq[ref] = self._edit_seq.get(ref, 0) + 1
        try:
            await self._update(ref, message, seq)
        except DeliveryError as exc:
            if not exc.retry_after:
                raise
            # the newest state wins once chat.update reopens
            self._held_edits[ref] = (message, seq)
            if self._flusher is None or self._flusher.done():
                self._flusher = asyncio.create_task(self._flush_edits(), name="slack-edits")
            raise

    async def _update(self, ref: str, message: Outgoing, seq: int) -> None:
        channel, ts = split_ref(ref)
        async with self._edit_lock(ref):
            if self._edit_seq.get(ref, 0) != seq:
                return  # a newer edit of this message was made meanwhile: this one is stale
            self._gate("chat.update")
            self._held_edits.pop(ref, None)  # this newer edit replaces a held one
            try:
                await self.client.chat_update(
                    channel=channel,
                    ts=ts,
                    text=_plain(message.text or " "),
                    blocks=blocks_for(message),
                )
            except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                self._note("chat.update", exc)
                raise slack_error(exc, "chat.update") from exc

    def _edit_lock(self, ref: str) -> asyncio.Lock:
        if len(self._edit_locks) > MAX_EDIT_STATE:  # forget messages no edit is using
            for old in [r for r, lock in self._edit_locks.items() if not lock.locked()]:
                if old not in self._held_edits:
                    self._edit_locks.pop(old, None)
                    self._edit_seq.pop(old, None)
        return self._edit_locks.setdefault(ref, asyncio.Lock())

    async def upload(
        self,
        target: ReplyTarget,
        name: str,
        data: bytes,
        media_type: str | None,
        *,
        reply_key: str,
    ) -> str:
        channel, thread_ts = self._where(target)
        kwargs: dict[str, Any] = {"channel": channel, "filename": name, "title": name}
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        self._gate("files.completeUploadExternal")
        try:
            response = await self.client.files_upload_v2(content=data, **kwargs)
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            self._note("files.completeUploadExternal", exc)
            raise slack_error(exc, "files_upload_v2") from exc
        files = response.get("files") or [{}]
        return f"{channel}:{files[0].get('id') or reply_key}"

    async def typing(self, target: ReplyTarget) -> None:
        """The assistant thread status where the app has it; silently nothing elsewhere."""
        try:
            channel, thread_ts = self._where(target)
        except DeliveryError:
            return
        if not thread_ts or channel in self._no_status:
            return
        try:
            await self.client.assistant_threads_setStatus(
                channel_id=channel, thread_ts=thread_ts, status="is working…"
            )
        except SlackApiError as exc:
            code = str(exc.response.get("error") or "") if exc.response is not None else ""
            if code != "ratelimited":
                self._no_status.add(channel)  # not an assistant thread / no scope: stop asking
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError):
            return

    # -- files --------------------------------------------------------------------------------

    def _may_send_token(self, url: str) -> bool:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if host == self._api_host and host:
            return True
        return parts.scheme == "https" and (host == "slack.com" or host.endswith(".slack.com"))

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        url = attachment.url
        if not url:
            raise DeliveryError(f"the file {attachment.name} has no download URL", permanent=True)
        if not self._may_send_token(url):
            raise DeliveryError(
                f"refusing to send the bot token to {urlsplit(url).hostname!r} for "
                f"{attachment.name}: not a Slack host",
                permanent=True,
            )
        limit = min(max_bytes, self.max_file_bytes)
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
                        raise DeliveryError(
                            f"the file {attachment.name} is over the {limit:,}-byte limit",
                            permanent=True,
                        )
                    chunks.append(chunk)
                return b"".join(chunks)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DeliveryError(f"downloading {attachment.name}: {exc}") from exc
